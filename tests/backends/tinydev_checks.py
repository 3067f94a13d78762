"""Behaviour of the ``tiny`` test backend (tests/backends/tinydev). Runs in a child
process whose PYTHONPATH holds the installed backend (see test_tinydev.py), so the
``import torch`` below autoloads it through its ``torch.backends`` entry point."""

import importlib.metadata
import struct

import pytest
import torch

from ootest.errors import DeviceError


def tiny(*values: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype).to("tiny")


def test_autoloaded_as_tiny() -> None:
    (ep,) = importlib.metadata.entry_points(group="torch.backends")
    assert (ep.name, ep.value) == ("tiny", "ootest_tinydev:_autoload")
    assert ep.dist is not None and ep.dist.name == "ootest-tinydev"
    assert torch._C._get_privateuse1_backend_name() == "tiny"
    assert torch.tiny.is_available() and torch.tiny.device_count() == 1
    assert torch.tiny.current_device() == 0
    x = torch.ones(2, device="tiny")
    assert x.device == torch.device("tiny", 0) and x.is_tiny  # a generated method


def test_registered_kernels_are_exactly_the_declared_ones() -> None:
    # imported here, after torch: imported first, it breaks torch's autoload of itself
    import ootest_tinydev

    regs = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    aten = sorted(r.removeprefix("aten::") for r in regs if r.startswith("aten::"))
    assert aten == sorted(ootest_tinydev.KERNELS)
    assert len(aten) == 25
    # torch's own c10d kernels are registered for PrivateUse1 too, whatever the backend
    assert all(r.startswith(("aten::", "c10d::")) for r in regs)


def test_views_alias_and_same_dtype_copies_are_right() -> None:
    t = torch.arange(6.0).view(2, 3).to("tiny")
    assert t.view(6).data_ptr() == t.data_ptr()
    t.t()[2, 1] = 5.0  # a view of a view, filled in place
    assert t.cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert t[1, 1].item() == 4.0
    c = torch.empty(3, 2, device="tiny")
    c.copy_(t.t())  # strided, tiny -> tiny
    assert c.cpu().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert torch.zeros(2, device="tiny").cpu().tolist() == [0.0, 0.0]


def test_out_only_kernels_serve_composite_and_structured_functional_ops() -> None:
    a, b = tiny(1.0, -4.0, 9.0), tiny(2.0, 2.0, 2.0)
    # abs, logical_not: CompositeExplicitAutograd kernels that call the out= overload
    assert torch.abs(a).cpu().tolist() == [1.0, 4.0, 9.0]
    assert a.clone().abs_().cpu().tolist() == [1.0, 4.0, 9.0]
    assert torch.logical_not(a).cpu().tolist() == [False, False, False]
    # add, sub, mul, div, neg, sqrt, sum.dim_IntList: structured ops, whose functional
    # and in-place overloads have torch's generated default-backend kernels
    # (CompositeExplicitAutogradNonFunctional) that call the registered out= kernel
    assert (a + b).cpu().tolist() == [3.0, -2.0, 11.0]
    assert a.clone().add_(b, alpha=2).cpu().tolist() == [5.0, 0.0, 13.0]
    assert (a - b).cpu().tolist() == [-1.0, -6.0, 7.0]
    assert (a * b).cpu().tolist() == [2.0, -8.0, 18.0]
    assert (a / b).cpu().tolist() == [0.5, -2.0, 4.5]
    assert torch.neg(a).cpu().tolist() == [-1.0, 4.0, -9.0]
    assert b.clone().sqrt_().cpu().tolist() == pytest.approx([2**0.5] * 3)
    assert a.sum().item() == 6.0 and a.view(3, 1).sum(0).cpu().tolist() == [6.0]
    for op in ("aten::abs", "aten::add.Tensor", "aten::add_.Tensor", "aten::sum"):
        assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, "PrivateUse1"), op


def test_out_only_kernel_does_not_serve_an_op_with_backend_kernels() -> None:
    # index_select has CPU/CUDA kernels for its functional overload, no composite one
    x, i = torch.arange(6.0).view(2, 3).to("tiny"), torch.tensor([2, 0]).to("tiny")
    out = torch.index_select(x, 1, i, out=torch.empty(0, device="tiny"))
    assert out.cpu().tolist() == [[2.0, 0.0], [5.0, 3.0]]
    assert not torch._C._dispatch_has_computed_kernel_for_dispatch_key(
        "aten::index_select", "PrivateUse1"
    )
    with pytest.raises(NotImplementedError, match=r"'aten::index_select' with .* 'tiny' backend"):
        torch.index_select(x, 1, i)


def test_functional_only_structured_kernel_serves_neither_out_nor_in_place() -> None:
    a, b = tiny(1.0, 2.0), tiny(1.0, 3.0)
    assert torch.eq(a, b).cpu().tolist() == [True, False]
    assert torch.mm(a.view(2, 1), b.view(1, 2)).cpu().tolist() == [[1.0, 3.0], [2.0, 6.0]]
    with pytest.raises(NotImplementedError, match=r"'aten::eq.Tensor_out' with .* 'tiny'"):
        a.clone().eq_(b)  # in place goes through the out= overload
    with pytest.raises(NotImplementedError, match=r"'aten::mm.out' with .* 'tiny'"):
        torch.mm(a.view(2, 1), b.view(1, 2), out=torch.empty(2, 2, device="tiny"))


def test_unregistered_op_raises_not_implemented_naming_the_backend() -> None:
    a = tiny(1.0, -2.0)
    with pytest.raises(NotImplementedError, match=r"Could not run 'aten::relu' with arguments "):
        torch.relu(a)
    # a structured op is reported by its out= overload, not by the overload called
    with pytest.raises(NotImplementedError, match=r"'aten::cumsum.out' with .* 'tiny' backend"):
        torch.cumsum(a, 0)


def test_dtype_changing_copy_is_silently_wrong() -> None:
    x = tiny(1.0, 2.0, 3.0)
    y = x.to(torch.float64)  # no error, no warning
    assert y.dtype == torch.float64 and y.device.type == "tiny"
    # the first 8 of the 12 source bytes, read as one double
    garbage = struct.unpack("<d", struct.pack("<ff", 1.0, 2.0))[0]
    assert y.cpu()[0].item() == garbage != 1.0
    z = x.to("cpu", torch.int64)  # tiny -> CPU with a conversion: the same bug
    assert z[0].item() == struct.unpack("<q", struct.pack("<ff", 1.0, 2.0))[0]
    w = torch.tensor([1, 2, 3]).to("tiny", torch.float32)  # CPU int64 -> tiny float32
    assert w.cpu().tolist() != [1.0, 2.0, 3.0]
    # the same conversions on the CPU, or same-dtype moves, are right
    assert x.cpu().double().tolist() == [1.0, 2.0, 3.0]
    assert torch.tensor([1, 2, 3]).to("tiny").cpu().tolist() == [1, 2, 3]


def test_emu_cannot_load_next_to_it() -> None:
    import ootest.device.emu as emu

    with pytest.raises(DeviceError, match=r"privateuse1 slot is already taken by backend 'tiny'"):
        emu.load("young")


def test_the_out_overload_scan_predicts_what_tiny_serves() -> None:
    # tests/backends/out_overloads.py asks the dispatcher; what tiny does above agrees
    from tests.backends.out_overloads import classify

    kind = {f.removeprefix("aten::"): k for k, rows in classify().items() for f, _, _ in rows}
    served = ["abs", "logical_not", "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"]
    served += ["neg", "sqrt", "sum.dim_IntList"]
    assert {op: kind[op] for op in served} == {
        "abs": "explicit",
        "logical_not": "explicit",
        **dict.fromkeys(served[2:], "structured"),
    }
    assert kind["index_select"] == "none"
