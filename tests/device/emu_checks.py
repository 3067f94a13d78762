"""Behaviour of the emu device. Runs in a subprocess (see test_emu.py) with
``--ootest-device emu`` so the backend is registered before torch.testing._internal."""

import pytest
import torch


def test_views_alias_storage() -> None:
    t = torch.zeros(2, 3, device="emu")
    t.t()[2, 1] = 5.0
    assert t.cpu()[1, 2].item() == 5.0
    v = t.view(6)
    assert v.data_ptr() == t.data_ptr()
    assert t[1].data_ptr() == t.data_ptr() + 3 * t.element_size()
    assert t.t().stride() == (1, 3) and t.t().storage_offset() == 0
    assert t[:, 1:].storage_offset() == 1


def test_in_place_and_out() -> None:
    a = torch.ones(4, device="emu")
    a.add_(2)
    out = torch.empty(4, device="emu")
    torch.mul(a, a, out=out)
    assert out.cpu().tolist() == [9.0] * 4 and a.cpu().tolist() == [3.0] * 4


def test_dtype_conversion_and_scalars() -> None:
    x = torch.tensor([1.5, 2.5], device="emu")
    assert x.to(torch.int64).cpu().tolist() == [1, 2]
    assert x.to(torch.float16).dtype == torch.float16
    assert x[1].item() == 2.5 and x.device.type == "emu"
    assert torch.tensor(True, device="emu").item() is True


def test_autograd_mlp_matches_cpu() -> None:
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    dev = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    dev.load_state_dict(cpu.state_dict())
    dev.to("emu")
    x = torch.randn(5, 8)
    cpu(x).sum().backward()
    dev(x.to("emu")).sum().backward()
    for a, b in zip(cpu.parameters(), dev.parameters(), strict=True):
        assert b.grad is not None and b.grad.device.type == "emu"
        torch.testing.assert_close(b.grad.cpu(), a.grad)


def test_unsupported_op_raises_standard_error() -> None:
    with pytest.raises(NotImplementedError, match=r"aten::cumsum.*'emu' backend"):
        torch.cumsum(torch.ones(3, device="emu"), 0)


def test_unsupported_dtype_names_op_and_dtype() -> None:
    a = torch.ones(2, 2, dtype=torch.int64, device="emu")
    with pytest.raises(NotImplementedError, match=r"aten::mm does not support dtype Long"):
        torch.mm(a, a)
    with pytest.raises(NotImplementedError, match=r"does not support dtype Double"):
        torch.ones(2, dtype=torch.float64, device="emu")


def test_registrations_reflect_profile() -> None:
    regs = set(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"))
    assert "aten::add.Tensor" in regs and "aten::mm" in regs
    assert "aten::cumsum" not in regs and "aten::cumsum.out" not in regs
    assert "aten::empty.memory_format" in regs


def test_profile_swap_full() -> None:
    from ootest.device import emu

    emu.load("full")
    try:
        x = torch.arange(4.0, dtype=torch.float64, device="emu")
        assert torch.cumsum(x, 0).cpu().tolist() == [0.0, 1.0, 3.0, 6.0]
        assert "aten::cumsum" in torch._C._dispatch_get_registrations_for_dispatch_key(
            "PrivateUse1"
        )
    finally:
        emu.load("young")


def test_device_generic_tests_instantiate_for_emu() -> None:
    from torch.testing._internal import common_device_type as cdt
    from torch.testing._internal.common_utils import TestCase

    class TestProbe(TestCase):
        def test_x(self, device):
            pass

    scope = {"TestProbe": TestProbe}
    cdt.instantiate_device_type_tests(TestProbe, scope)
    names = [n for n in scope if n.startswith("TestProbe")]
    assert names and any(n in ("TestProbePRIVATEUSE1", "TestProbeEMU") for n in names)


def test_torch_compile_eager_backends_work_and_inductor_fails_cleanly() -> None:
    x = torch.ones(4, device="emu")

    def f(t: torch.Tensor) -> torch.Tensor:
        return (t * 2 + 1).sum()

    want = f(x).item()
    assert torch.compile(f, backend="eager")(x).item() == want
    torch._dynamo.reset()
    assert torch.compile(f, backend="aot_eager")(x).item() == want
    torch._dynamo.reset()
    # Inductor has no codegen for emu: an ordinary Python exception, not a crash.
    with pytest.raises(Exception):  # noqa: B017
        torch.compile(f)(x)


def test_rng_functions_of_a_backend_module() -> None:
    """What upstream tests call on the device module (nn.functional.rrelu saves and
    restores the device RNG): emu's generator is the CPU one."""
    emu = torch.emu
    emu.manual_seed(123)
    assert emu.initial_seed() == 123
    state = emu.get_rng_state()
    first = torch.rand(4, device="emu").cpu()
    emu.set_rng_state(state)
    assert torch.equal(torch.rand(4, device="emu").cpu(), first)
    emu.set_rng_state_all(emu.get_rng_state_all())
    torch.manual_seed(7)  # seeds every device, emu included, without recursion
    a = torch.rand(3, device="emu").cpu()
    emu.manual_seed_all(7)
    assert torch.equal(torch.rand(3, device="emu").cpu(), a)
    emu.seed()
    assert emu.initial_seed() != 7


def test_quantized_tensors_on_full_match_cpu() -> None:
    """`full` runs quantized tensors (QuantizedPrivateUse1) as the CPU does: created
    on the device, viewed in place, computed through the QuantizedCPU kernels."""
    from ootest.device import emu

    emu.load("full")
    try:
        x = torch.randn(4, 3)
        q = torch.quantize_per_tensor(x.to("emu"), 0.1, 5, torch.quint8)
        ref = torch.quantize_per_tensor(x, 0.1, 5, torch.quint8)
        assert q.device.type == "emu" and q.is_quantized and q.dtype == torch.quint8
        assert (q.q_scale(), q.q_zero_point()) == (0.1, 5)
        assert torch.equal(q.int_repr().cpu(), ref.int_repr())
        assert torch.equal(q.flip(0).int_repr().cpu(), ref.flip(0).int_repr())
        v = q.t()
        assert v._base is q and v.data_ptr() == q.data_ptr() and v.is_quantized
        assert torch.equal(q.cpu().dequantize(), ref.dequantize())
        scales, zero_points = torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0, 1, 2])
        qc = torch.quantize_per_channel(x.to("emu"), scales, zero_points, 1, torch.qint8)
        refc = torch.quantize_per_channel(x, scales, zero_points, 1, torch.qint8)
        assert qc.device.type == "emu" and qc.q_per_channel_axis() == 1
        assert torch.equal(qc.dequantize().cpu(), refc.dequantize())
        e = torch._empty_affine_quantized(
            [2, 3], scale=2, zero_point=3, dtype=torch.quint8, device="emu"
        )
        assert e.device.type == "emu" and e.ravel()._base is e
        regs = torch._C._dispatch_get_registrations_for_dispatch_key("QuantizedPrivateUse1")
        assert "aten::flip" in regs and "aten::_empty_affine_quantized" in regs
    finally:
        emu.load("young")


def test_quantized_tensors_are_not_in_young() -> None:
    # young allows no quantized dtype: the standard error of a backend without them
    with pytest.raises(NotImplementedError, match=r"aten::_empty_affine_quantized.*'Quantizedemu'"):
        torch._empty_affine_quantized(
            [2], scale=1.0, zero_point=0, dtype=torch.quint8, device="emu"
        )
    assert not torch._C._dispatch_get_registrations_for_dispatch_key("QuantizedPrivateUse1")


def test_out_on_another_device_is_an_error() -> None:
    a = torch.ones(3, device="emu")
    with pytest.raises(
        RuntimeError, match=r"aten::add.out: expected all tensors to be on the same device"
    ):
        torch.add(a, a, out=torch.empty(3))
