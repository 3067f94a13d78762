"""The faults of emu's ``faulty`` profile that leave the process alive. Runs in a
subprocess (see test_emu_faults.py) with ``--ootest-device emu:faulty``; the
crash and the hang are checked there, each in a process of its own."""

import pytest
import torch

REL_ERROR = 1e-3  # profiles/faulty.yaml: exp


def _rel(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    return ((actual.cpu() - expected) / expected).abs()


def test_wrong_exp_is_off_by_the_declared_relative_error() -> None:
    x = torch.linspace(-3, 3, 50)
    want = torch.exp(x)
    out = torch.empty(50, device="emu")
    inplace = x.to("emu")
    inplace.exp_()
    for got in (torch.exp(x.to("emu")), torch.exp(x.to("emu"), out=out), inplace):
        rel = _rel(got, want)
        # every element, every overload: 1e-3 up to float32 rounding
        assert torch.allclose(rel, torch.full_like(rel, REL_ERROR), rtol=1e-3, atol=0), rel
    # integer input, floating result: the result is what is off
    ints = torch.arange(1, 6)
    rel = _rel(torch.exp(ints.to("emu")), torch.exp(ints))
    assert torch.allclose(rel, torch.full_like(rel, REL_ERROR), rtol=1e-3, atol=0), rel


def test_wrong_exp_fails_the_default_comparison_with_a_known_mismatch() -> None:
    x = torch.linspace(-3, 3, 50)
    got = torch.exp(x.to("emu")).cpu()
    with pytest.raises(AssertionError, match=r"Greatest relative difference: 0\.00100"):
        torch.testing.assert_close(got, torch.exp(x))
    # a tolerance just above the declared error accepts it
    torch.testing.assert_close(got, torch.exp(x), rtol=1.01e-3, atol=0)


def test_error_fault_fires_from_min_numel_on() -> None:
    small = torch.ones(199, device="emu")
    assert (small + small).cpu().tolist() == [2.0] * 199
    big = torch.ones(10, 20, dtype=torch.int64, device="emu")
    with pytest.raises(RuntimeError) as e:
        big + 1
    assert str(e.value).splitlines()[0] == (
        "emu (PrivateUse1) profile 'faulty': device error in aten::add.Tensor on 200 "
        "elements: tile count exceeds the launch limit (TILE_OVERFLOW)"
    )
    with pytest.raises(RuntimeError, match=r"device error in aten::add_\.Tensor on 200"):
        big.add_(1)


def test_op_dtypes_restrict_mul_to_floating_types() -> None:
    a = torch.full((3,), 2.0, device="emu")
    assert (a * a).cpu().tolist() == [4.0] * 3
    i = torch.ones(3, dtype=torch.int64, device="emu")
    with pytest.raises(NotImplementedError, match=r"aten::mul\.Tensor does not support dtype Long"):
        i * i


def test_crash_and_hang_spare_the_other_dtypes() -> None:
    # abs crashes for int64 only; sub hangs for float32 only
    assert torch.abs(torch.tensor([-1.5, 2.0], device="emu")).cpu().tolist() == [1.5, 2.0]
    assert (torch.tensor([3, 4], device="emu") - 1).cpu().tolist() == [2, 3]


def test_faulty_enables_the_ops_of_young() -> None:
    from ootest.device import emu

    def regs() -> set[str]:
        return set(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"))

    faulty = regs()
    emu.load("young")
    try:
        assert regs() == faulty
    finally:
        emu.load("faulty")


@pytest.mark.parametrize("profile", ["young", "full"])
def test_other_profiles_have_no_faults(profile: str) -> None:
    from ootest.device import emu

    emu.load(profile)
    try:
        x = torch.linspace(-3, 3, 50)
        assert torch.equal(torch.exp(x.to("emu")).cpu(), torch.exp(x))
        assert torch.abs(torch.tensor([-1, 2], device="emu")).cpu().tolist() == [1, 2]
        assert (torch.ones(2, device="emu") - 1).cpu().tolist() == [0.0, 0.0]
        big = torch.ones(300, dtype=torch.int64, device="emu")
        assert torch.equal((big + big * 2).cpu(), torch.full((300,), 3))
    finally:
        emu.load("faulty")
    assert torch.abs(torch.tensor([-1.0], device="emu")).cpu().tolist() == [1.0]
    with pytest.raises(RuntimeError, match="TILE_OVERFLOW"):
        torch.ones(300, device="emu") + 1
