// tiny: a test backend shaped like a young third-party privateuse1 backend.
//
// Not a reference device (that is emu): it is deliberately small and buggy, so
// that ootest can be tested against what real backends look like (DESIGN.md
// section 9). Storage is host memory tagged with the PrivateUse1 device; compute
// runs the CPU kernel on host aliases of the operands.
//
// What makes it "real":
// - explicit kernels for a few aten ops only, no boxed fallback: every other op
//   raises the dispatcher's NotImplementedError for the 'tiny' backend;
// - several compute ops registered only as `out=` kernels (abs.out, add.out, ...):
//   which functional ops they serve is torch's business (README.md);
// - no dtype is declared anywhere;
// - Bug [tiny raw-byte copy]: a copy that changes the dtype copies raw bytes;
// - Bug [tiny pinned host memory]: pinning a CPU tensor (Tensor.pin_memory(),
//   which tiny serves as the current accelerator) dereferences a table that was
//   never created: the process dies of SIGSEGV.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

namespace {

constexpr c10::DeviceType kTiny = c10::DeviceType::PrivateUse1;

// ---------------------------------------------------------------- allocator
void tiny_free(void* ptr) { c10::free_cpu(ptr); }

struct TinyAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    return {data, data, &tiny_free, c10::Device(kTiny, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tiny_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

TinyAllocator g_allocator;

// ------------------------------------------------------------- device guard
struct TinyGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTiny; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check(d);
    return c10::Device(kTiny, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kTiny, 0); }
  void setDevice(c10::Device d) const override { check(d); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kTiny, 0));
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
    TORCH_CHECK(d.type() == kTiny && (!d.has_index() || d.index() == 0),
                "tiny has a single device (tiny:0); got ", d);
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, TinyGuardImpl);

// -------------------------------------------------------------------- hooks
// Bug [tiny pinned host memory]: as the current accelerator, tiny serves pinned
// host memory (Tensor.pin_memory() on a CPU tensor) and answers is_pinned().
// Both consult the table of pinned blocks, which is never created: the process
// dies of SIGSEGV, whatever op a test meant to exercise.
std::unordered_set<const void*>* g_pinned_blocks = nullptr;

bool pinned(const void* data) {
  std::unordered_set<const void*>* volatile table = g_pinned_blocks;
  return table->count(data) > 0;
}

void tiny_host_free(void* ptr) { c10::free_cpu(ptr); }

struct TinyHostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = c10::alloc_cpu(nbytes ? nbytes : 1);
    std::unordered_set<const void*>* volatile table = g_pinned_blocks;
    table->insert(data);
    return {data, data, &tiny_host_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &tiny_host_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

TinyHostAllocator g_host_allocator;

struct TinyHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kTiny, 0); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool isPinnedPtr(const void* data) const override { return pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_host_allocator; }
};

// ------------------------------------------------------------ host aliases
// A CPU tensor on the same host bytes as a tiny tensor (CPU tensors pass through).
at::Tensor host(const at::Tensor& t) {
  if (t.device().type() != kTiny) return t;
  if (t.numel() == 0) return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// ---------------------------------------------------------- storage kernels
at::Tensor tiny_empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                    std::optional<at::Layout>, std::optional<at::Device>,
                                    std::optional<bool>,
                                    std::optional<at::MemoryFormat> memory_format) {
  constexpr c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(size, &g_allocator, ks, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor tiny_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                              std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                              std::optional<at::Device>, std::optional<bool>) {
  constexpr c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, ks,
                                           c10::dtype_or_default(dtype));
}

// Bug [tiny raw-byte copy]: like a driver memcpy that was never told about
// dtypes, a copy between different dtypes moves the source's bytes as they are
// (as many as both sides hold). No error, garbage values. Same-dtype copies go
// through the CPU's copy and are right (strides, broadcasting, conj/neg).
at::Tensor tiny_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return dst;
  if (self.scalar_type() != dst.scalar_type()) {
    const size_t n = std::min(self.nbytes(), dst.nbytes());
    std::memcpy(dst.data_ptr(), self.data_ptr(), n);
    return dst;
  }
  host(dst).copy_(host(self), non_blocking);
  return dst;
}

at::Tensor tiny_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) dst.resize_(self.sizes());
  return tiny_copy_from(self, dst, false);
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

const at::Tensor& tiny_resize_(const at::Tensor& self, c10::IntArrayRef size,
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

at::Tensor& tiny_set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                             c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  impl->set_sizes_and_strides(size, stride);
  return self;
}

at::Tensor& tiny_set_source_storage(at::Tensor& self, c10::Storage source) {
  const auto n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return tiny_set_storage(self, std::move(source), 0, {n}, {1});
}

at::Scalar tiny_local_scalar_dense(const at::Tensor& self) { return host(self).item(); }

// ---------------------------------------------------------- compute kernels
// The result of a CPU computation written into a tiny `out` (resized like
// torch's out= kernels do); the CPU copy converts dtypes correctly here.
at::Tensor& into(at::Tensor& out, const at::Tensor& result) {
  at::native::resize_output(out, result.sizes());
  host(out).copy_(result);
  return out;
}

// A new tiny tensor holding a CPU result.
at::Tensor fresh(const at::Tensor& result) {
  at::Tensor out = tiny_empty_strided(result.sizes(), result.strides(), result.scalar_type(),
                                      std::nullopt, std::nullopt, std::nullopt);
  host(out).copy_(result);
  return out;
}

at::Tensor& tiny_fill_(at::Tensor& self, const at::Scalar& value) {
  host(self).fill_(value);
  return self;
}

at::Tensor& tiny_zero_(at::Tensor& self) {
  host(self).zero_();
  return self;
}

at::Tensor tiny_eq(const at::Tensor& self, const at::Tensor& other) {
  return fresh(at::eq(host(self), host(other)));
}

at::Tensor tiny_mm(const at::Tensor& self, const at::Tensor& mat2) {
  return fresh(at::mm(host(self), host(mat2)));
}

// Compute kernels registered only as out= (see README.md: which functional ops
// they serve).
at::Tensor& tiny_abs_out(const at::Tensor& self, at::Tensor& out) {
  return into(out, at::abs(host(self)));
}
at::Tensor& tiny_neg_out(const at::Tensor& self, at::Tensor& out) {
  return into(out, at::neg(host(self)));
}
at::Tensor& tiny_sqrt_out(const at::Tensor& self, at::Tensor& out) {
  return into(out, at::sqrt(host(self)));
}
at::Tensor& tiny_logical_not_out(const at::Tensor& self, at::Tensor& out) {
  return into(out, at::logical_not(host(self)));
}
at::Tensor& tiny_add_out(const at::Tensor& self, const at::Tensor& other,
                         const at::Scalar& alpha, at::Tensor& out) {
  return into(out, at::add(host(self), host(other), alpha));
}
at::Tensor& tiny_sub_out(const at::Tensor& self, const at::Tensor& other,
                         const at::Scalar& alpha, at::Tensor& out) {
  return into(out, at::sub(host(self), host(other), alpha));
}
at::Tensor& tiny_mul_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  return into(out, at::mul(host(self), host(other)));
}
at::Tensor& tiny_div_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  return into(out, at::div(host(self), host(other)));
}
at::Tensor& tiny_index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                  at::Tensor& out) {
  return into(out, at::index_select(host(self), dim, host(index)));
}
at::Tensor& tiny_sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                         std::optional<at::ScalarType> dtype, at::Tensor& out) {
  return into(out, at::sum(host(self), dim, keepdim, dtype));
}

}  // namespace

// Note [tiny kernels]: this list is the backend's whole surface; the package's
// KERNELS constant and the tests hold the same list.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // tensors exist, move and alias
  m.impl("empty.memory_format", &tiny_empty_memory_format);
  m.impl("empty_strided", &tiny_empty_strided);
  m.impl("_copy_from", &tiny_copy_from);
  m.impl("_copy_from_and_resize", &tiny_copy_from_and_resize);
  m.impl("resize_", &tiny_resize_);
  m.impl("set_.source_Storage", &tiny_set_source_storage);
  m.impl("set_.source_Storage_storage_offset", &tiny_set_storage);
  m.impl("_local_scalar_dense", &tiny_local_scalar_dense);
  m.impl("as_strided", &at::native::as_strided_tensorimpl);
  m.impl("view", &at::native::view);
  m.impl("_reshape_alias", &at::native::_reshape_alias);
  // compute: functional and in-place kernels
  m.impl("fill_.Scalar", &tiny_fill_);
  m.impl("zero_", &tiny_zero_);
  m.impl("eq.Tensor", &tiny_eq);
  m.impl("mm", &tiny_mm);
  // compute: out= kernels only
  m.impl("abs.out", &tiny_abs_out);
  m.impl("neg.out", &tiny_neg_out);
  m.impl("sqrt.out", &tiny_sqrt_out);
  m.impl("logical_not.out", &tiny_logical_not_out);
  m.impl("add.out", &tiny_add_out);
  m.impl("sub.out", &tiny_sub_out);
  m.impl("mul.out", &tiny_mul_out);
  m.impl("div.out", &tiny_div_out);
  m.impl("sum.IntList_out", &tiny_sum_out);
  m.impl("index_select.out", &tiny_index_select_out);
}

namespace {
struct Init {
  Init() {
    c10::SetAllocator(kTiny, &g_allocator);
    static TinyHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} g_init;
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}
