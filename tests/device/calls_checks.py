"""Checks of call examples (Note [Call examples]) on emu: run by test_calls.py in a
subprocess with ``--ootest-device emu:full`` (not collected by the default run)."""

from __future__ import annotations

import json

import torch

from ootest.device.calls import RANGE_UP_TO, VALUES_UP_TO, decode_call, encode_call

DEV = "emu"


def roundtrip(*args: object, **kwargs: object) -> tuple[dict, tuple, tuple]:  # type: ignore[type-arg]
    text = encode_call(args, kwargs, DEV)
    assert text is not None
    spec = json.loads(text)
    cpu, dev = decode_call(spec, DEV, seed=7)
    return spec, cpu, dev


def test_small_tensors_keep_their_values_on_both_sides() -> None:
    x = torch.tensor([[1.5, -2.0], [float("inf"), float("nan")]], device=DEV)
    spec, (cargs, _), (dargs, _) = roundtrip(x, 2, alpha=0.5)
    t = spec["args"][0]
    assert (t["T"], t["shape"], t["dev"], t["v"]) == ("float32", [2, 2], True,
                                                       [1.5, -2.0, "inf", "nan"])  # fmt: skip
    assert spec["args"][1] == 2 and spec["kwargs"] == {"alpha": 0.5}
    assert cargs[0].device.type == "cpu" and dargs[0].device.type == DEV
    torch.testing.assert_close(dargs[0].cpu(), x.cpu(), equal_nan=True)
    torch.testing.assert_close(cargs[0], x.cpu(), equal_nan=True)


def test_large_tensors_are_seeded_and_integers_stay_in_range() -> None:
    big = torch.zeros(VALUES_UP_TO + 1, device=DEV)
    idx = torch.arange(3, 3 + VALUES_UP_TO + 5, device=DEV)
    spec, (cargs, _), (dargs, _) = roundtrip(big, idx)
    assert "v" not in spec["args"][0] and "lo" not in spec["args"][0]
    assert (spec["args"][1]["lo"], spec["args"][1]["hi"]) == (3, 3 + VALUES_UP_TO + 4)
    assert torch.equal(cargs[0], dargs[0].cpu()) and torch.equal(cargs[1], dargs[1].cpu())
    assert int(cargs[1].min()) >= 3 and int(cargs[1].max()) <= 3 + VALUES_UP_TO + 4
    again = decode_call(spec, DEV, seed=7)[0][0][0]
    assert torch.equal(again, cargs[0])  # the same seed, the same values
    huge = torch.zeros(RANGE_UP_TO + 1, dtype=torch.int64, device=DEV)
    assert "lo" not in json.loads(encode_call((huge,), {}, DEV) or "{}")["args"][0]


def test_strides_expanded_views_and_cpu_arguments() -> None:
    t = torch.arange(6.0, device=DEV).reshape(2, 3).t()
    e = torch.ones(1, 3, device=DEV).expand(4, 3)
    host = torch.ones(2)
    spec, (cargs, _), (dargs, _) = roundtrip(t, e, host)
    assert spec["args"][0]["stride"] == [1, 3] and spec["args"][1]["stride"] == [0, 1]
    assert spec["args"][2]["dev"] is False and "stride" not in spec["args"][2]
    for c, d, orig in zip(cargs, dargs, (t, e, host), strict=True):
        assert c.shape == d.shape == orig.shape and c.stride() == orig.stride()
        assert torch.equal(c, d.cpu())
    assert dargs[2].device.type == "cpu"  # a CPU argument stays on the CPU


def test_dtypes_devices_and_lists_are_kept_and_the_rest_is_refused() -> None:
    spec, (_, ckw), (_, dkw) = roundtrip(
        [2, 3], dtype=torch.float16, device=torch.device(DEV), layout=torch.strided,
        memory_format=torch.contiguous_format,
    )  # fmt: skip
    assert spec["kwargs"]["dtype"] == {"dtype": "float16"}
    assert ckw["device"].type == "cpu" and dkw["device"].type == DEV
    assert dkw["dtype"] is torch.float16 and dkw["memory_format"] is torch.contiguous_format
    assert encode_call((torch.Generator(),), {}, DEV) is None
    assert encode_call((torch.ones(2).to_sparse(),), {}, DEV) is None
    assert encode_call((list(range(300)),), {}, DEV) is None  # too many items
    # the budget counts the list and each item: 1 + 255 fit, 1 + 256 do not, counted
    # before any tensor is read (``stack`` of 1,024 slices)
    assert encode_call((list(range(255)),), {}, DEV) is not None
    assert encode_call((list(range(256)),), {}, DEV) is None
    assert encode_call(([torch.ones(2)] * 1024,), {}, DEV) is None
    assert encode_call((1,), {"out": [[1] * 253]}, DEV) is not None  # 1 + 1 + 1 + 253
    assert encode_call((1,), {"out": [[1] * 254]}, DEV) is None


def test_a_correct_device_replays_every_kind_of_call_ok() -> None:
    """No false alarms (Note [Replaying calls]): on emu:full every call matches the CPU."""
    from ootest.device.calls import example_key
    from ootest.device.replay_worker import replay_one

    x = torch.randn(3, 4, device=DEV)
    calls = [
        ("aten::add.Tensor", (x, x), {"alpha": 2}),
        ("aten::exp", (x,), {}),
        ("aten::add_.Tensor", (x.clone(), x), {}),  # in place: the written input compares
        ("aten::random_.from", (x.clone(), 0, 10), {}),  # seeded random: shapes only
        ("aten::empty.memory_format", ([2, 3],), {"dtype": torch.float32, "device": x.device}),
        ("aten::copy_", (torch.empty(3, 4, device=DEV), torch.ones(3, 4)), {}),
        ("aten::index_select", (x, 0, torch.tensor([2, 0], device=DEV)), {}),
        ("aten::sum.dim_IntList", (x, [1]), {"keepdim": True}),
        ("aten::_local_scalar_dense", (x[0, 0].clone(),), {}),
        ("aten::t", (x,), {}),
        ("aten::max.dim", (x, 1), {}),  # two results
    ]
    for op, args, kwargs in calls:
        text = encode_call(args, kwargs, DEV)
        assert text is not None, op
        got = replay_one({"key": example_key(op, text), "op": op, "call": text}, DEV)
        assert got["status"] == "ok", (op, got)
    # an index out of range raises on the CPU and on the device alike: an error path
    bad = json.dumps(
        {"args": [{"T": "float32", "shape": [2], "dev": True}, 0,
                  {"T": "int64", "shape": [1], "dev": True, "v": [7]}], "kwargs": {}}
    )  # fmt: skip
    got = replay_one({"key": "0" * 20, "op": "aten::index_select", "call": bad}, DEV)
    assert got["status"] == "ok" and got["error_path"] is True, got
    assert got["detail"].startswith("error path: raises on the device as on the CPU")
    assert replay_one({"key": "0" * 20, "op": "aten::nosuch", "call": "{}"}, DEV)["status"] == (
        "unusable"
    )


def test_views_keep_their_values_offset_and_storage() -> None:
    """Kept values of a transposed tensor stay in logical order; a view's offset and
    storage are rebuilt, so ``as_strided`` past the view works as it did."""
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=DEV).t()
    spec, (cargs, _), (dargs, _) = roundtrip(t)
    assert spec["args"][0]["v"] == [1.0, 3.0, 2.0, 4.0]
    assert torch.equal(cargs[0], t.cpu()) and torch.equal(dargs[0].cpu(), t.cpu())
    base = torch.arange(12.0, device=DEV)
    v = base[6:]
    spec, (cargs, _), (dargs, _) = roundtrip(v, [2, 3], [3, 1], 0)
    a = spec["args"][0]
    assert a["offset"] == 6 and "storage" not in a  # the view reaches its storage's end
    assert roundtrip(base[2:5])[0]["args"][0]["storage"] == 12  # it does not
    got = torch.ops.aten.as_strided.default(dargs[0], [2, 3], [3, 1], 6)
    want = torch.ops.aten.as_strided.default(cargs[0], [2, 3], [3, 1], 6)
    assert torch.equal(got.cpu(), want) and torch.equal(want, v.cpu().reshape(2, 3))


def test_full_range_integers_and_huge_sizes_are_bounded() -> None:
    from ootest.device.calls import MAX_ELEMENTS, elements

    big = torch.tensor([-(2**63), 2**63 - 1] * 40, device=DEV)
    _, (cargs, _), (dargs, _) = roundtrip(big)
    assert torch.equal(cargs[0], dargs[0].cpu())
    assert elements({"args": [[100000, 100000]], "kwargs": {}}) > MAX_ELEMENTS


def test_what_a_correct_device_may_choose_otherwise_is_not_a_mismatch() -> None:
    """Ties (sort's indices), summation order (mm within 10x the default tolerance),
    decompositions' signs: a correct device is not reported (Note [Replaying calls])."""
    from ootest.device.replay_worker import _compare

    vals, a, b = torch.tensor([1, 1, 2]), torch.tensor([0, 1, 2]), torch.tensor([1, 0, 2])
    assert _compare((vals, a), (vals, b), True, frozenset({1})) is None
    assert "2 of 3 elements differ" in str(_compare((vals, a), (vals, b), True))
    c = torch.full((4,), 1.0)
    d = c + 9e-5
    assert _compare(c, d, True, scale=10.0) is None
    assert "greatest absolute difference" in str(_compare(c, d, True))
    assert _compare(c, -c, False) is None  # shapes and dtypes only
    assert "float16[4], expected float32[4]" in str(_compare(c, c.half(), False))


def test_an_error_path_is_compared_by_exception_class() -> None:
    """A call that raises on the CPU behaves alike on the device when the device
    raises the same class or a subclass (a missing kernel's NotImplementedError is
    a RuntimeError, which a test expecting the CPU's RuntimeError accepts); another
    exception, or none, is a fault. Both exceptions are recorded."""
    from ootest.device.replay_worker import replay_one

    lib = torch.library.Library("ootest_check", "DEF")
    kinds = {
        "alike": (RuntimeError("bad input"), NotImplementedError("no kernel for emu")),
        "other": (IndexError("index 7 is out of bounds"), RuntimeError("no kernel for emu")),
        "quiet": (RuntimeError("bad input"), None),
        "same": (ValueError("bad value"), ValueError("bad value")),
        "named": (RuntimeError("found cpu and cpu"), RuntimeError(f"found cpu and {DEV}:0")),
    }

    def kernel(e: Exception | None) -> object:
        def run(x: torch.Tensor) -> torch.Tensor:
            if e is not None:
                raise e
            return x.clone()

        return run

    for name, (cpu, dev) in kinds.items():
        lib.define(f"{name}(Tensor x) -> Tensor")
        lib.impl(name, kernel(cpu), "CPU")
        lib.impl(name, kernel(dev), "PrivateUse1")
    call = json.dumps({"args": [{"T": "float32", "shape": [2], "dev": True, "v": [1.0, 2.0]}],
                       "kwargs": {}})  # fmt: skip

    def replay(name: str) -> dict[str, object]:
        return replay_one({"key": "0" * 20, "op": f"ootest_check::{name}", "call": call}, DEV)

    got = replay("alike")
    assert got == {
        "status": "ok",
        "error_path": True,
        "same_message": False,
        "cpu_error": "RuntimeError: bad input",
        "error": "NotImplementedError",
        "device_error": "NotImplementedError: no kernel for emu",
        "detail": "error path: raises on the device as on the CPU "
        "(RuntimeError on the CPU, NotImplementedError on the device, another message)",
    }
    same = replay("same")
    assert (same["status"], same["same_message"]) == ("ok", True)
    assert not str(same["detail"]).endswith("another message)")
    # the device's name in a message reads as the CPU's: the same message
    assert replay("named")["same_message"] is True
    other = replay("other")
    assert (other["status"], other["error"]) == ("failed", "RuntimeError")
    assert other["cpu_error"] == "IndexError: index 7 is out of bounds"
    assert "the CPU raised IndexError" in str(other["detail"])
    quiet = replay("quiet")
    assert quiet["status"] == "mismatch"
    assert quiet["detail"] == "the CPU raised RuntimeError: bad input; the device returned"


def test_inputs_the_device_cannot_take(monkeypatch: object) -> None:
    """A device that cannot hold a dtype (emu:young's float64) fails the call's
    inputs before the op: ``failed`` (a test making the call meets the same), or
    ``unusable`` when the CPU raises too: the op never ran on the device, so no
    error path of it is known (issue 36; Note [Replaying calls])."""
    import ootest.device.calls as calls
    from ootest.device.replay_worker import replay_one

    real = calls._to

    def refuse(t: torch.Tensor, device: str, cpu: object = None) -> torch.Tensor:
        if t.dtype == torch.float64 and device != "cpu":
            raise calls.Unplaced(NotImplementedError("no Double here"), cpu)
        return real(t, device, cpu)

    monkeypatch.setattr(calls, "_to", refuse)  # type: ignore[attr-defined]

    def replay(op: str, dtype: str, *rest: object) -> dict[str, object]:
        call = json.dumps({"args": [{"T": dtype, "shape": [2, 2], "dev": True}, *rest],
                           "kwargs": {}})  # fmt: skip
        return replay_one({"key": "0" * 20, "op": op, "call": call}, DEV)

    got = replay("aten::neg", "float64")
    assert (got["status"], got["error"]) == ("failed", "NotImplementedError"), got
    assert got["detail"] == "its inputs cannot be put on the device: no Double here"
    assert replay("aten::neg", "float32")["status"] == "ok"
    # flip(x, [0, 0]) raises on the CPU: the device raising while taking x is no
    # error path of flip (it never ran there)
    err = replay("aten::flip", "float64", [0, 0])
    assert err["status"] == "unusable" and "error_path" not in err, err
    assert str(err["detail"]).startswith(
        "its inputs cannot be put on the device (NotImplementedError: no Double here) "
        "and it raises on the CPU (RuntimeError: "
    ), err
    assert str(err["detail"]).endswith("): the op never ran on the device"), err

    # Note [A refresh replays what can change a decision]: a call an earlier replay
    # found the device could not take is re-checked by placement alone: the same
    # error keeps its row (flip is not run: run, it raises on the CPU: unusable);
    # a device that takes the inputs now replays it whole
    row = {"error": got["error"], "detail": got["detail"]}

    def again(dtype: str, was: dict[str, object], *rest: object) -> dict[str, object]:
        call = json.dumps({"args": [{"T": dtype, "shape": [2, 2], "dev": True}, *rest],
                           "kwargs": {}})  # fmt: skip
        return replay_one({"key": "0" * 20, "op": "aten::flip", "call": call,
                           "unplaced": was}, DEV)  # fmt: skip

    assert again("float64", row, [0, 0]) == {"status": "failed", **row}
    assert again("float64", {**row, "detail": "other"}, [0, 0])["status"] == "unusable"
    assert again("float32", row, [0])["status"] == "ok"

    # the CPU's side of a call the device cannot take is built once, with the same
    # values as the CPU alone builds them (seeded ones, views and values after it)
    spec = {"args": [{"T": "float32", "shape": [3], "dev": True},
                     {"T": "float64", "shape": [2, 3], "dev": True, "stride": [1, 2]},
                     {"T": "complex64", "shape": [3], "dev": True, "conj": True},
                     {"T": "int64", "shape": [3], "dev": True, "lo": 0, "hi": 9}],
            "kwargs": {"out": {"T": "float64", "shape": [1], "dev": True, "v": [2.5]}}}  # fmt: skip
    try:
        decode_call(spec, DEV, seed=11)
        raise AssertionError("the float64 inputs were taken")
    except calls.Unplaced as u:
        assert u.call is not None
        (alone, kw_alone), _ = decode_call(spec, "cpu", seed=11)
        got_args, got_kw = u.call
        assert len(got_args) == len(alone) == 4 and set(got_kw) == {"out"}
        for a, b in zip([*got_args, got_kw["out"]], [*alone, kw_alone["out"]], strict=True):
            assert a.device.type == "cpu" and a.is_conj() == b.is_conj()
            assert a.stride() == b.stride()
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_call_with_tensors_on_both_sides_is_not_judged_by_the_cpus() -> None:
    """Issue 34 item 4: a test checking the error for inputs on the CPU and the
    device passes on the device (both raise what it expects); its recorded call,
    replayed with that placement, raises on the device while the CPU (holding every
    tensor) returns: no evidence either way, never a failure. A CPU scalar goes
    anywhere: a call that raises with one is the device's failure."""
    from ootest.device.replay_worker import replay_one

    lib = torch.library.Library("ootest_apart", "DEF")
    lib.define("apart(Tensor x, Tensor y) -> Tensor")
    lib.impl("apart", lambda x, y: x + y, "CPU")

    def device_kernel(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("Expected all tensors to be on the same device")

    lib.impl("apart", device_kernel, "PrivateUse1")

    def replay(*tensors: dict[str, object]) -> dict[str, object]:
        call = json.dumps({"args": list(tensors), "kwargs": {}})
        return replay_one({"key": "0" * 20, "op": "ootest_apart::apart", "call": call}, DEV)

    on = {"T": "float32", "shape": [2], "dev": True, "v": [1.0, 2.0]}
    off = {**on, "dev": False}
    scalar = {"T": "float32", "shape": [], "dev": False, "v": [1.0]}
    apart = replay(on, off)
    assert apart["status"] == "unusable", apart
    assert str(apart["detail"]).startswith("tensors on the CPU and the device: the device raised")
    assert replay(on, on)["status"] == "failed"  # all on the device: its failure
    assert replay(on, scalar)["status"] == "failed"


def test_conjugate_and_negative_views_are_rebuilt_as_views() -> None:
    """Note [Conjugate and negative views]: a lazy conj or neg view is recorded
    and rebuilt as one (a copy of a conj view off a young backend crashed it while
    a copy of its plain values replayed fine), with the view's own values."""
    z = torch.complex(torch.randn(3), torch.randn(3)).to(DEV).conj()
    n = torch._neg_view(torch.tensor([1.0, -2.0, float("inf")]).to(DEV))
    spec, (cargs, _), (dargs, _) = roundtrip(z, n)
    assert spec["args"][0]["conj"] is True and "neg" not in spec["args"][0]
    assert spec["args"][1]["neg"] is True and spec["args"][1]["v"] == [-1.0, 2.0, "-inf"]
    for c, d in zip(cargs, dargs, strict=True):
        assert (c.is_conj(), c.is_neg()) == (d.is_conj(), d.is_neg())
    assert cargs[0].is_conj() and cargs[1].is_neg()
    assert torch.equal(cargs[0].resolve_conj(), dargs[0].cpu().resolve_conj())
    assert torch.equal(cargs[1].resolve_neg(), torch.tensor([-1.0, 2.0, float("-inf")]))
    assert torch.equal(dargs[1].cpu().resolve_neg(), cargs[1].resolve_neg())
    plain = json.loads(encode_call((torch.ones(2, device=DEV),), {}, DEV) or "{}")
    assert "conj" not in plain["args"][0] and "neg" not in plain["args"][0]
