// emu: a reference privateuse1 backend on host memory.
//
// Storage lives in ordinary host memory but is tagged with the PrivateUse1
// device, so dispatch, strides, views and aliasing behave exactly as they do
// for a real out-of-tree accelerator. Compute goes through
// at::native::cpu_fallback, but only for the ops a capability profile
// enables: every other op raises PyTorch's standard NotImplementedError for
// the PrivateUse1 backend, like a young backend would.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_empty_affine_quantized_native.h>
#include <ATen/ops/_empty_per_channel_affine_quantized_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/empty_quantized_native.h>
#include <ATen/ops/empty_strided_native.h>
#include <ATen/ops/q_per_channel_axis_native.h>
#include <ATen/ops/q_per_channel_scales_native.h>
#include <ATen/ops/q_per_channel_zero_points_native.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <atomic>
#include <bitset>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace {

constexpr c10::DeviceType kEmu = c10::DeviceType::PrivateUse1;

// ---------------------------------------------------------------- allocator
void emu_free(void* ptr) { c10::free_cpu(ptr); }

struct EmuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    return {data, data, &emu_free, c10::Device(kEmu, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &emu_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

EmuAllocator g_allocator;

// ------------------------------------------------------------- device guard
struct EmuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kEmu; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check(d);
    return c10::Device(kEmu, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kEmu, 0); }
  void setDevice(c10::Device d) const override { check(d); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kEmu, 0));
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}

 private:
  static void check(c10::Device d) {
    TORCH_CHECK(d.type() == kEmu && (!d.has_index() || d.index() == 0),
                "emu has a single device (emu:0); got ", d);
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuardImpl);

// -------------------------------------------------------------------- hooks
struct EmuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    // Random ops run through the CPU fallback, so the CPU generator is the one
    // that actually produces the numbers.
    return at::detail::getDefaultCPUGenerator();
  }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kEmu, 0); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

// ------------------------------------------------------------------ profile
// Note [emu capability profile]
// The profile is loaded from Python (ootest.device.emu). Ops are registered
// one by one as PrivateUse1 kernels so that
// torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1") lists
// exactly the enabled ops, like a real backend's registrations would.
//
// Note [emu faults]
// Declared in the profile's faults: mapping, resolved to operator names in
// Python, and injected here, in the kernel wrapper, so that they behave like a
// real device's bugs: a crash is a real fatal signal in the kernel, a hang
// blocks in the kernel (GIL released), wrong numbers come back from the kernel.
// Every fault is deterministic: it fires on every call whose device arguments
// match its dtypes and size, and never otherwise.
enum class FaultKind { Wrong, Crash, Hang, Error };

struct Fault {
  FaultKind kind = FaultKind::Error;
  double rel_error = 0.0;            // Wrong: floating results are scaled by (1 + rel_error)
  std::set<c10::ScalarType> dtypes;  // fires when a device argument has one; empty: any
  int64_t min_numel = 0;             // fires when a device argument has this many elements
  int signal = SIGSEGV;              // Crash
  std::string message;               // Error
  bool noncontiguous = false;        // fires only when a device argument is non-contiguous
  int64_t after_calls = 0;           // fires only after this many matching calls in the process
  std::shared_ptr<std::atomic<int64_t>> calls = std::make_shared<std::atomic<int64_t>>(0);
};

struct Profile {
  std::string name = "none";
  std::set<c10::ScalarType> dtypes;
  std::unordered_map<std::string, std::set<c10::ScalarType>> op_dtypes;
  std::unordered_map<std::string, Fault> faults;
};
std::mutex g_mutex;
Profile g_profile;
std::vector<std::unique_ptr<torch::Library>> g_libraries;

void register_quantized_natives(torch::Library& lib);  // below, with the storage kernels

std::string dtype_list(const std::set<c10::ScalarType>& s) {
  std::string out;
  for (auto t : s) {
    if (!out.empty()) out += ", ";
    out += c10::toString(t);
  }
  return out;
}

void check_dtype(const std::string& op, c10::ScalarType t) {
  const std::set<c10::ScalarType>* allowed = &g_profile.dtypes;
  auto it = g_profile.op_dtypes.find(op);
  if (it != g_profile.op_dtypes.end()) allowed = &it->second;
  if (allowed->empty()) return;  // an empty set means: every dtype
  TORCH_CHECK_NOT_IMPLEMENTED(
      allowed->count(t), "emu (PrivateUse1) profile '", g_profile.name, "': ", op,
      " does not support dtype ", c10::toString(t), " (supported: ", dtype_list(*allowed), ")");
}

at::Tensor host_alias(const at::Tensor& t);  // storage and view kernels, below

// What the device arguments of one call look like (for the faults).
struct CallShape {
  std::bitset<static_cast<size_t>(c10::ScalarType::NumOptions)> dtypes;  // no allocation per call
  int64_t max_numel = 0;
  bool noncontiguous = false;  // a device argument is not contiguous
};

void check_tensor(const std::string& op, const at::Tensor& t, CallShape& shape) {
  if (!t.defined() || t.device().type() != kEmu) return;
  check_dtype(op, t.scalar_type());
  shape.dtypes.set(static_cast<size_t>(t.scalar_type()));
  shape.max_numel = std::max<int64_t>(shape.max_numel, t.numel());
  if (!shape.noncontiguous && !t.is_contiguous()) shape.noncontiguous = true;
}

const Fault* matching_fault(const std::string& op, const CallShape& shape) {
  if (g_profile.faults.empty()) return nullptr;
  auto it = g_profile.faults.find(op);
  if (it == g_profile.faults.end()) return nullptr;
  const Fault& f = it->second;
  if (shape.max_numel < f.min_numel) return nullptr;
  if (f.noncontiguous && !shape.noncontiguous) return nullptr;
  bool dtype_ok = f.dtypes.empty();
  for (auto t : f.dtypes)
    if (shape.dtypes.test(static_cast<size_t>(t))) dtype_ok = true;
  if (!dtype_ok) return nullptr;
  // state across calls: the first after_calls matching calls in this process are fine
  if (f.after_calls > 0 && f.calls->fetch_add(1) < f.after_calls) return nullptr;
  return &f;
}

[[noreturn]] void crash(const std::string& op, const Fault& f) {
  // A real driver often says something on its way down; the fatal signal is
  // what matters (faulthandler, if installed, dumps the Python stack first).
  std::fprintf(stderr, "emu: device fault in %s (profile '%s'): %s\n", op.c_str(),
               g_profile.name.c_str(), f.signal == SIGABRT ? "abort" : "segmentation fault");
  std::fflush(stderr);
  if (f.signal == SIGABRT) std::abort();
  std::raise(SIGSEGV);
  std::signal(SIGSEGV, SIG_DFL);  // a handler returned: die of the signal anyway
  std::raise(SIGSEGV);
  std::_Exit(128 + SIGSEGV);
}

[[noreturn]] void hang(const std::string& op) {
  std::fprintf(stderr, "emu: %s hangs on the device (profile '%s')\n", op.c_str(),
               g_profile.name.c_str());
  std::fflush(stderr);
  // Like a kernel waiting for a device that never answers: other Python threads
  // (and a watchdog) keep running; only a timeout or a signal ends it.
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release no_gil;
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// Every floating result is off by f.rel_error, relatively: deterministic, so a
// comparison with the CPU fails by a known amount.
void perturb_results(const c10::FunctionSchema& schema, const Fault& f,
                     torch::jit::Stack* stack) {
  const auto n = schema.returns().size();
  auto perturb = [&](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kEmu || t.numel() == 0) return;
    if (!(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()))) return;
    if (at::has_internal_overlap(t) == at::MemOverlap::Yes) return;
    host_alias(t).mul_(1.0 + f.rel_error);
  };
  for (size_t i = stack->size() - n; i < stack->size(); ++i) {
    const auto& iv = (*stack)[i];
    if (iv.isTensor()) {
      perturb(iv.toTensor());
    } else if (iv.isTensorList()) {
      for (const at::Tensor& t : iv.toTensorList().vec()) perturb(t);
    }
  }
}

// A device kernel writes only into device memory: an out= (or other written)
// tensor on another device is an error, as on any accelerator, not something
// the CPU fallback may quietly copy back into.
void check_outputs_on_device(const std::string& op, const c10::FunctionSchema& schema,
                             const torch::jit::Stack& stack, size_t n) {
  const size_t first = stack.size() - n;
  for (size_t j = 0; j < n; ++j) {
    const auto* alias = schema.arguments()[j].alias_info();
    if (alias == nullptr || !alias->isWrite()) continue;
    const auto& iv = stack[first + j];
    std::vector<at::Tensor> written;
    if (iv.isTensor()) {
      written.push_back(iv.toTensor());
    } else if (iv.isTensorList()) {
      written = iv.toTensorList().vec();
    }
    for (const auto& t : written) {
      TORCH_CHECK(!t.defined() || t.device().type() == kEmu, op,
                  ": expected all tensors to be on the same device, but argument '",
                  schema.arguments()[j].name(), "' is on ", t.device(),
                  " and the operation runs on emu");
    }
  }
}

// The kernel of every profile op: the profile's checks and faults, then the
// CPU kernel of the same op. `CpuKey` is where the CPU fallback redispatches:
// CPU for ordinary tensors, QuantizedCPU for quantized ones.
template <c10::DispatchKey CpuKey>
void emu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const std::string name = c10::toString(schema.operator_name());
  const auto n = schema.arguments().size();
  CallShape shape;
  for (size_t i = stack->size() - n; i < stack->size(); ++i) {
    const auto& iv = (*stack)[i];
    if (iv.isTensor()) {
      check_tensor(name, iv.toTensor(), shape);
    } else if (iv.isTensorList()) {
      for (const at::Tensor& t : iv.toTensorList().vec()) check_tensor(name, t, shape);
    } else if (iv.isOptionalTensorList()) {
      for (const auto& t : iv.toOptionalTensorList().vec())
        if (t.has_value()) check_tensor(name, *t, shape);
    }
  }
  check_outputs_on_device(name, schema, *stack, n);
  const Fault* fault = matching_fault(name, shape);
  if (fault != nullptr) {
    switch (fault->kind) {
      case FaultKind::Crash:
        crash(name, *fault);
      case FaultKind::Hang:
        hang(name);
      case FaultKind::Error:
        TORCH_CHECK(false, "emu (PrivateUse1) profile '", g_profile.name, "': device error in ",
                    name, " on ", shape.max_numel, " elements: ",
                    fault->message.empty() ? "kernel launch failed" : fault->message);
      case FaultKind::Wrong:
        break;
    }
  }
  at::native::cpu_fallback(op, stack, /*error_on_views=*/false, CpuKey);
  if (fault != nullptr && fault->kind == FaultKind::Wrong) perturb_results(schema, *fault, stack);
}

c10::ScalarType parse_dtype(const std::string& name) {
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    auto t = static_cast<c10::ScalarType>(i);
    if (name == c10::toString(t)) return t;
  }
  TORCH_CHECK_VALUE(false, "emu: unknown dtype '", name, "'");
}

// (kind, rel_error, dtypes, min_numel, signal name, message, noncontiguous, after_calls),
// see ootest.device.emu
using FaultSpec = std::tuple<std::string, double, std::vector<std::string>, int64_t, std::string,
                             std::string, bool, int64_t>;

Fault parse_fault(const std::string& op, const FaultSpec& spec) {
  const auto& [kind, rel_error, dtypes, min_numel, signal, message, noncontiguous, after_calls] =
      spec;
  Fault f;
  if (kind == "wrong") {
    f.kind = FaultKind::Wrong;
  } else if (kind == "crash") {
    f.kind = FaultKind::Crash;
  } else if (kind == "hang") {
    f.kind = FaultKind::Hang;
  } else if (kind == "error") {
    f.kind = FaultKind::Error;
  } else {
    TORCH_CHECK_VALUE(false, "emu: unknown fault kind '", kind, "' for ", op);
  }
  TORCH_CHECK_VALUE(signal == "SIGSEGV" || signal == "SIGABRT", "emu: unknown signal '", signal,
                    "' for ", op);
  f.rel_error = rel_error;
  for (const auto& d : dtypes) f.dtypes.insert(parse_dtype(d));
  f.min_numel = min_numel;
  f.signal = signal == "SIGABRT" ? SIGABRT : SIGSEGV;
  f.message = message;
  f.noncontiguous = noncontiguous;
  f.after_calls = after_calls;
  return f;
}

// Note [emu quantized tensors]
// A quantized tensor dispatches to QuantizedPrivateUse1, not PrivateUse1. When
// the profile allows a quantized dtype, emu registers there what QuantizedCPU
// has: storage, copy and view kernels natively (below), every other op through
// the same boxed CPU fallback (`quantized_ops`, resolved in Python from the
// QuantizedCPU registrations). Without a quantized dtype nothing is registered,
// and a quantized tensor on emu fails with PyTorch's standard NotImplementedError
// for the 'Quantizedemu' backend, like on a backend without quantization.
void set_profile(const std::string& profile_name, const std::vector<std::string>& ops,
                 const std::vector<std::string>& dtypes,
                 const std::unordered_map<std::string, std::vector<std::string>>& op_dtypes,
                 const std::unordered_map<std::string, FaultSpec>& faults, bool quantized,
                 const std::vector<std::string>& quantized_ops) {
  // Parsed in full before anything changes, so that a bad entry leaves the
  // previous profile in place.
  Profile next;
  next.name = profile_name;
  for (const auto& d : dtypes) next.dtypes.insert(parse_dtype(d));
  for (const auto& [op, ds] : op_dtypes) {
    auto& s = next.op_dtypes[op];
    for (const auto& d : ds) s.insert(parse_dtype(d));
  }
  for (const auto& [op, spec] : faults) next.faults[op] = parse_fault(op, spec);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_libraries.clear();  // deregisters the kernels of a previous profile
  g_profile = std::move(next);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                              c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const auto& op : ops) {
    lib->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<
                              &emu_boxed_kernel<c10::DispatchKey::CPU>>());
  }
  g_libraries.push_back(std::move(lib));
  if (quantized) {
    auto qlib = std::make_unique<torch::Library>(
        torch::Library::IMPL, "aten", c10::DispatchKey::QuantizedPrivateUse1, __FILE__, __LINE__);
    register_quantized_natives(*qlib);
    for (const auto& op : quantized_ops) {
      qlib->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<
                                 &emu_boxed_kernel<c10::DispatchKey::QuantizedCPU>>());
    }
    g_libraries.push_back(std::move(qlib));
  }
}

std::string profile_name() { return g_profile.name; }

// ------------------------------------------------- storage and view kernels
bool storage_dtype_ok(c10::ScalarType t) {
  return g_profile.dtypes.empty() || g_profile.dtypes.count(t) ||
         std::any_of(g_profile.op_dtypes.begin(), g_profile.op_dtypes.end(),
                     [t](const auto& kv) { return kv.second.count(t) > 0; });
}

void check_storage_dtype(c10::ScalarType t) {
  TORCH_CHECK_NOT_IMPLEMENTED(storage_dtype_ok(t), "emu (PrivateUse1) profile '",
                              g_profile.name, "' does not support dtype ", c10::toString(t),
                              " (supported: ", dtype_list(g_profile.dtypes), ")");
}

at::Tensor emu_empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                   std::optional<at::Layout>, std::optional<at::Device>,
                                   std::optional<bool>,
                                   std::optional<at::MemoryFormat> memory_format) {
  auto st = c10::dtype_or_default(dtype);
  check_storage_dtype(st);
  constexpr c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(size, &g_allocator, ks, st, memory_format);
}

at::Tensor emu_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                             std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                             std::optional<at::Device>, std::optional<bool>) {
  auto st = c10::dtype_or_default(dtype);
  check_storage_dtype(st);
  constexpr c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, ks, st);
}

// A QuantizedCPU tensor on the same host bytes as a quantized emu tensor, with
// the same quantization parameters (per-channel scales and zero points as CPU
// aliases too, so that CPU kernels never meet an emu tensor). Built without
// dispatching: a dispatched call here would come back through the fallback.
at::Tensor host_alias_quantized(const at::Tensor& t) {
  at::QuantizerPtr quantizer = at::get_qtensorimpl(t)->quantizer();
  const auto scheme = quantizer->qscheme();
  if (scheme == at::kPerChannelAffine || scheme == at::kPerChannelAffineFloatQParams) {
    auto* per_channel = static_cast<at::PerChannelAffineQuantizer*>(quantizer.get());
    const at::Tensor scales = per_channel->scales();
    const at::Tensor zero_points = per_channel->zero_points();
    if (scales.device().type() == kEmu || zero_points.device().type() == kEmu) {
      quantizer = at::make_per_channel_affine_quantizer(host_alias(scales),
                                                        host_alias(zero_points),
                                                        per_channel->axis(), t.scalar_type());
    }
  }
  const c10::Storage& source = t.storage();
  c10::Storage storage(c10::Storage::use_byte_size_t(), source.nbytes(),
                       at::DataPtr(source.mutable_data(), c10::Device(c10::DeviceType::CPU)),
                       nullptr, false);
  auto alias = at::detail::make_tensor<at::QTensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::QuantizedCPU), t.dtype(),
      std::move(quantizer));
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return alias;
}

// A CPU tensor that aliases the same host bytes as an emu tensor.
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().type() != kEmu) return t;
  if (t.is_quantized()) return host_alias_quantized(t);
  at::Tensor alias;
  if (t.numel() == 0) {
    alias = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  } else {
    alias = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  }
  if (t.is_conj()) alias = alias._conj();
  if (t.is_neg()) alias = alias._neg_view();
  return alias;
}

at::Tensor& emu_copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.numel() != 0) {
    at::Tensor dst = host_alias(self);
    dst.copy_(host_alias(src), non_blocking);  // CPU rules: quantize, refuse q -> float, ...
  }
  // As the CPU's copy_ does, a quantized copy takes the source's parameters
  // (the CPU copy above set them on the alias only).
  if (self.is_quantized() && src.is_quantized()) at::set_quantizer_(self, src.quantizer());
  return self;
}

at::Tensor emu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  emu_copy_(d, self, non_blocking);
  return dst;
}

at::Tensor emu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) dst.resize_(self.sizes());
  at::Tensor d = dst;
  emu_copy_(d, self, false);
  return dst;
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  auto* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  c10::DataPtr fresh = g_allocator.allocate(nbytes);
  const size_t keep = std::min(nbytes, impl->nbytes());
  if (keep) std::memcpy(fresh.get(), impl->data(), keep);
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(nbytes);
}

void EmuHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage_bytes(storage, newsize);
}

const at::Tensor& emu_resize_(const at::Tensor& self, c10::IntArrayRef size,
                              std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const size_t needed = at::detail::computeStorageNbytesContiguous(
      size, self.dtype().itemsize(), impl->storage_offset());
  const auto& storage = impl->unsafe_storage();
  if (needed > storage.nbytes()) resize_storage_bytes(storage, needed);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& emu_set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                            c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  impl->set_sizes_and_strides(size, stride);
  return self;
}

at::Tensor& emu_set_source_storage(at::Tensor& self, c10::Storage source) {
  const auto itemsize = self.dtype().itemsize();
  const int64_t n = static_cast<int64_t>(source.nbytes() / itemsize);
  return emu_set_storage(self, std::move(source), 0, {n}, {1});
}

at::Tensor& emu_set_tensor(at::Tensor& self, const at::Tensor& src) {
  return emu_set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Scalar emu_local_scalar_dense(const at::Tensor& self) {
  check_storage_dtype(self.scalar_type());
  return host_alias(self).item();
}

// The quantized empties allocate through new_qtensor, which takes the
// PrivateUse1 allocator (emu's); only the profile's dtype check is added.
at::Tensor emu_empty_affine_quantized(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                      std::optional<at::Layout> layout,
                                      std::optional<at::Device> device,
                                      std::optional<bool> pin_memory, double scale,
                                      int64_t zero_point,
                                      std::optional<at::MemoryFormat> memory_format) {
  check_storage_dtype(c10::dtype_or_default(dtype));
  return at::native::empty_affine_quantized(size, dtype, layout, device, pin_memory, scale,
                                            zero_point, memory_format);
}

at::Tensor emu_empty_per_channel_affine_quantized(
    c10::IntArrayRef size, const at::Tensor& scales, const at::Tensor& zero_points, int64_t axis,
    std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
    std::optional<at::Device> device, std::optional<bool> pin_memory,
    std::optional<at::MemoryFormat> memory_format) {
  check_storage_dtype(c10::dtype_or_default(dtype));
  return at::native::empty_per_channel_affine_quantized(size, scales, zero_points, axis, dtype,
                                                        layout, device, pin_memory,
                                                        memory_format);
}

at::Tensor emu_empty_unknown_quantized(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                       std::optional<at::Layout> layout,
                                       std::optional<at::Device> device,
                                       std::optional<bool> pin_memory,
                                       std::optional<at::MemoryFormat> memory_format) {
  check_storage_dtype(c10::dtype_or_default(dtype));
  return at::native::empty_unknown_quantized(size, dtype, layout, device, pin_memory,
                                             memory_format);
}

at::Tensor emu_empty_strided_unknown_quantized(c10::IntArrayRef size, c10::IntArrayRef stride,
                                               std::optional<at::ScalarType> dtype,
                                               std::optional<at::Layout> layout,
                                               std::optional<at::Device> device,
                                               std::optional<bool> pin_memory) {
  check_storage_dtype(c10::dtype_or_default(dtype));
  return at::native::empty_strided_unknown_quantized(size, stride, dtype, layout, device,
                                                     pin_memory);
}

at::Tensor emu_squeeze_quantized(const at::Tensor& self) {
  return at::native::squeeze_quantized(self);
}
at::Tensor emu_squeeze_quantized_dim(const at::Tensor& self, int64_t dim) {
  return at::native::squeeze_quantized(self, dim);
}
at::Tensor emu_squeeze_quantized_dims(const at::Tensor& self, c10::IntArrayRef dims) {
  return at::native::squeeze_quantized(self, dims);
}

// What QuantizedCPU registers natively (storage, copies, views, and the
// quantization parameters: the fallback's copy to the CPU asks for those, so
// through the fallback they would recurse), for QuantizedPrivateUse1; see
// Note [emu quantized tensors].
void register_quantized_natives(torch::Library& lib) {
  lib.impl("qscheme", &at::native::qscheme_quant);
  lib.impl("q_scale", &at::native::q_scale_quant);
  lib.impl("q_zero_point", &at::native::q_zero_point_quant);
  lib.impl("q_per_channel_scales", &at::native::q_per_channel_scales);
  lib.impl("q_per_channel_zero_points", &at::native::q_per_channel_zero_points);
  lib.impl("q_per_channel_axis", &at::native::q_per_channel_axis);
  lib.impl("empty.memory_format", &emu_empty_unknown_quantized);
  lib.impl("empty_strided", &emu_empty_strided_unknown_quantized);
  lib.impl("_empty_affine_quantized", &emu_empty_affine_quantized);
  lib.impl("_empty_per_channel_affine_quantized", &emu_empty_per_channel_affine_quantized);
  lib.impl("empty_quantized", &at::native::empty_quantized);
  lib.impl("empty_like", &at::native::empty_like_quantized);
  lib.impl("_copy_from", &emu_copy_from);
  lib.impl("_copy_from_and_resize", &emu_copy_from_and_resize);
  lib.impl("resize_", &emu_resize_);
  lib.impl("set_.source_Storage_storage_offset", &emu_set_storage);
  lib.impl("as_strided", &at::native::as_strided_qtensorimpl);
  lib.impl("view", &at::native::view);
  lib.impl("_reshape_alias", &at::native::_reshape_alias);
  lib.impl("unfold", &at::native::unfold);
  lib.impl("squeeze", &emu_squeeze_quantized);
  lib.impl("squeeze.dim", &emu_squeeze_quantized_dim);
  lib.impl("squeeze.dims", &emu_squeeze_quantized_dims);
  lib.impl("unsqueeze", &at::native::unsqueeze_quantized);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &emu_empty_memory_format);
  m.impl("empty_strided", &emu_empty_strided);
  m.impl("copy_", &emu_copy_);
  m.impl("_copy_from", &emu_copy_from);
  m.impl("_copy_from_and_resize", &emu_copy_from_and_resize);
  m.impl("resize_", &emu_resize_);
  m.impl("set_.source_Storage", &emu_set_source_storage);
  m.impl("set_.source_Storage_storage_offset", &emu_set_storage);
  m.impl("set_.source_Tensor", &emu_set_tensor);
  m.impl("_local_scalar_dense", &emu_local_scalar_dense);
  m.impl("as_strided", &at::native::as_strided_tensorimpl);
  m.impl("view", &at::native::view);
  m.impl("_reshape_alias", &at::native::_reshape_alias);
  m.impl("unfold", &at::native::unfold);
  m.impl("view_as_real", &at::native::view_as_real);
  m.impl("view_as_complex", &at::native::view_as_complex);
}

namespace {
struct Init {
  Init() {
    c10::SetAllocator(kEmu, &g_allocator);
    static EmuHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} g_init;
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("set_profile", &set_profile,
        "Register the kernels of a capability profile (and set its faults)");
  m.def("profile_name", &profile_name);
}
