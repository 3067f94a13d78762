"""``--ootest-ops-capture PATH``: record the aten ops every variant calls on the device.

Note [Op capture]
While a test runs (setup, call and teardown), a ``TorchDispatchMode`` sees every
aten call below autograd: the calls a backend's kernels receive. A composite op
the backend has no kernel of its own for (``aten::ones``, ``new_empty``) is
followed into its composite kernel with the recorder on, so what is recorded is
what it calls (``empty``, ``fill_``): the ops a backend must implement. It keeps a call
when at least one tensor argument (or a ``device=`` argument) is on the device
under test, so CPU reference computations inside a test are not recorded. The hot
path is one dict lookup per call; an op seen for the first time in a variant is
written at once (before it runs), so a test that kills its process leaves the
ops it reached, the last of them being where it stopped. When the test ends the
remaining call counts and how it ended (outcome, the op whose kernel raised,
the exception type) follow.

Note [Call dtypes]
Each recorded call also has a dtype signature: the distinct dtypes of its tensor
arguments on the device (and a factory's ``dtype=``), sorted by name. The hot
path keys its counts by (op, dtypes as torch passed them), still one dict
lookup per call; the first call of an op with a signature new to the variant
writes a ``dtypes`` record (``{"op": "aten::mm", "dtypes": ["int64"]}``) before
it runs, like the op's first call. Selection checks these against the dtypes a
backend declares per op: a float32-parametrized test that multiplies int64
matrices calls ``mm`` with int64, whatever its dtype axis says.

Note [Call examples] (ootest.device.calls): per variant and (op, dtypes as torch
passed them), the first call and the largest one (elements on the device) are
written down as ``example`` records, so ``ootest ops replay`` can run the same
calls on another device before any test runs. The first is written before it
runs; the largest, when it is not the first, when the test ends. So is the
first call to end each other way (to return, or to raise an exception of a class
not seen yet for that op and dtypes), when it ends: an error-path test calls
``flip(0, 1, 1)`` (a ``RuntimeError``) then ``flip(3)`` (an ``IndexError``), and
a device without the kernel raises ``NotImplementedError`` for both, which the
first test accepts and the second does not; a test whose first call of an op
raises may call it again to succeed. The replay must see each. Counting a call's
elements and one set lookup per call are what the hot path adds.

``torch.compile``: the mode is switched off while Dynamo and AOT Autograd compile
(``ignore_compile_internals``; otherwise every compiled test would fall back to
eager and test something else), and the forward/backward graphs AOT Autograd
produces are read from its ``aot_graphs`` log and recorded as ``compiled``; the
calls the compiled artifact then makes at run time are recorded as usual.

A variant whose test source branches on the device (``device_type``, ``'cuda' in
device``, ``TEST_CUDA``...) is flagged: its ops may differ on another device.

Note [Capture sees one thread]: the capture is a ``TorchDispatchMode``, which is
thread-local: ops a test runs in a thread it starts are not seen, and a test
doing all its device work in one would look like it calls no op on the device
(``no_device_ops``, mandatory on a pass: issue 36). A ``threading`` profile hook,
set for the variant only and removed from each new thread at its first event,
notes that the test started a thread; the variant's ops are then uncertain (a
``device_branch`` record with ``"threads": true``). Threads started outside
``threading`` (``_thread``, C++) are not seen.

Each process appends its own lines to PATH (one ``write`` per line, so pytest-xdist
workers never interleave); the format is the op map's capture stream
(ootest.opmap.capture).
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ootest.device.calls import encode_call
from ootest.opmap.names import DATA_TRANSFER
from ootest.plugin.isolation import runs_no_code as _runs_no_code
from ootest.record.results import Appender

if TYPE_CHECKING:
    from ootest.plugin.keys import Core

_BRANCH = re.compile(
    r"\bdevice_type\b|\bself\.device\b|\bdevice\s*(?:==|!=)|['\"](?:cuda|cpu|xpu|mps)['\"]\s*(?:in|==|!=)"
    r"|\bin\s+\(?['\"](?:cuda|cpu)|\.startswith\(\s*['\"](?:cuda|cpu)|\bis_cuda\b|\bTEST_CUDA\b"
    r"|torch\.cuda\.is_available|\bonlyOn|\bskipIf(?:Cuda|Cpu|Xpu|Mps)|\bdeviceCountAtLeast\b"
)
_UNKNOWN = object()
_GRAPH_OP = re.compile(r"torch\.ops\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)")


def _branches_on_device(func: Any) -> bool:
    """Whether the test's source branches on the device (Note [Op capture]).

    Read once per test *template*: upstream's device-type instantiation makes a
    new function object per variant, each ``functools.wraps`` of the one written
    in the file (``getsource`` unwraps it anyway), so a cache keyed by the
    variant's own function read and tokenized the same source for every variant
    -- 23,523 times on ``test_unary_ufuncs.py``, most of the capture's cost there
    (Note [Capture cost])."""
    try:
        func = inspect.unwrap(func)
    except ValueError:  # a __wrapped__ cycle
        pass
    try:
        return _source_branches(func)
    except TypeError:  # unhashable: not a function getsource reads
        return False


@functools.cache
def _source_branches(func: Any) -> bool:
    try:
        src = inspect.getsource(func)
    except (OSError, TypeError):
        return False
    return _BRANCH.search(src) is not None


def _graph_op_name(ns: str, name: str, overload: str) -> str:
    return f"{ns}::{name}" if overload == "default" else f"{ns}::{name}.{overload}"


class OpCapture:
    """The pytest side of the op map: streams each variant's ops (Note [Op capture])."""

    def __init__(self, path: Path, core: Core) -> None:
        self.path, self.core = path, core
        self.out: Appender | None = None
        self.mode: Any = None
        self.variant: str | None = None
        self.nodeid: str | None = None
        self.item: pytest.Item | None = None
        self.file: str | None = None
        self.outcome: str | None = None
        self._log_handler: logging.Handler | None = None
        self._unwatch_printing: Any = None
        self.recording = False  # inside a test, with the mode on (Note [Printed tensors])

    # ---------------------------------------------------------------- session
    def pytest_configure(self, config: pytest.Config) -> None:
        if getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput"):
            return  # a pytest-xdist controller runs no test
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self.out = Appender(self.path)
        if fresh:
            self.out.write(self._provenance())
        self.mode = _make_mode(self)
        self._log_handler = _watch_aot_graphs(self)
        self._unwatch_printing = _watch_printing(self)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._log_handler is not None:
            _unwatch_aot_graphs(self._log_handler)
        if self._unwatch_printing is not None:
            self._unwatch_printing()
            self._unwatch_printing = None
        if self.out is not None:
            self.out.close()
            self.out = None

    def _provenance(self) -> dict[str, Any]:
        import torch

        from ootest.version import ootest_version

        dev = self.core.device
        return {
            "kind": "provenance",
            "torch_version": str(torch.__version__),
            "torch_git": str(getattr(torch.version, "git_version", "") or ""),
            "device": dev.name if dev else None,
            "profile": dev.target if dev is not None and dev.kind == "emu" else None,
            "ootest_version": ootest_version(),
            "time": time.time(),
        }

    # ---------------------------------------------------------------- per test
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, Any]:
        from ootest.plugin.keys import FACTS

        facts = item.stash.get(FACTS, None)
        if self.out is None or self.mode is None or facts is None:
            return (yield)
        self.variant, self.file = facts.variant_id, facts.file
        self.item, self.nodeid = item, None  # the node ID only when an ops line needs it
        self.outcome = None
        self.mode.start()
        obj = getattr(item, "obj", None)
        if _branches_on_device(getattr(obj, "__func__", obj)):
            self.out.write({"kind": "device_branch", "variant_id": self.variant})
        if _runs_no_code(item, nextitem):
            # skipped before setup, tearing nothing down: no op can run, so the
            # recorder is not entered (Note [Capture cost]); its records are the same
            try:
                return (yield)
            finally:
                self._finish()
        threads: list[bool] = []
        prev: Any = threading.getprofile()  # untyped: called with the event as given

        def started(frame: Any, event: Any, arg: Any) -> Any:
            # Note [Capture sees one thread]: the first event of a thread the test
            # started; the hook removes itself from that thread at once
            threads.append(True)
            sys.setprofile(prev)
            return prev(frame, event, arg) if prev is not None else None

        threading.setprofile(started)
        try:
            with self.mode:
                self.recording = True
                try:
                    return (yield)
                finally:
                    self.recording = False
        finally:
            threading.setprofile(prev)
            if threads and self.out is not None:
                self.out.write({"kind": "device_branch", "variant_id": self.variant,
                                "threads": True})  # fmt: skip
            self._finish()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from ootest.plugin.recorder import classify

        if self.variant is None:
            return
        outcome = classify(report)
        if outcome is not None and (self.outcome is None or outcome != "passed"):
            self.outcome = outcome  # teardown errors override a passed call

    def _finish(self) -> None:
        mode, out = self.mode, self.out
        if out is None or mode is None:
            return
        rest = {name: n - 1 for name, n in mode.counts_by_name().items() if n > 1}
        if rest:
            out.write(self._ops(rest, "eager"))
        for name, spec in mode.largest_calls():
            self.example(name, spec)
        stop, error = mode.stop
        out.write(
            {
                "kind": "stop",
                "variant_id": self.variant,
                "op": stop,
                "outcome": self.outcome,
                "error": error,
            }
        )
        self.variant, self.item = None, None

    def _ops(self, ops: dict[str, int], mode: str) -> dict[str, Any]:
        if self.nodeid is None and self.item is not None:
            from ootest.plugin.keys import item_node_id

            self.nodeid = item_node_id(self.item)
        return {
            "kind": "ops",
            "variant_id": self.variant,
            "nodeid": self.nodeid,
            "file": self.file,
            "mode": mode,
            "ops": ops,
        }

    def first_call(self, name: str) -> None:
        """An op the variant had not called before: written before it runs."""
        if self.out is not None:
            self.out.write(self._ops({name: 1}, "eager"))

    def example(self, name: str, spec: str) -> None:
        """A call example (Note [Call examples])."""
        if self.out is not None:
            self.out.write(
                {"kind": "example", "variant_id": self.variant, "op": name, "call": spec}
            )

    def first_dtypes(self, name: str, dtypes: list[str]) -> None:
        """A dtype signature the variant had not called ``name`` with before: written
        before the call runs (Note [Call dtypes])."""
        if self.out is not None:
            self.out.write(
                {"kind": "dtypes", "variant_id": self.variant, "op": name, "dtypes": dtypes}
            )

    def compiled_graph(self, text: str) -> None:
        if self.out is None or self.variant is None:
            return
        ops: dict[str, int] = {}
        for m in _GRAPH_OP.finditer(text):
            name = _graph_op_name(*m.groups())
            ops[name] = ops.get(name, 0) + 1
        if ops:
            self.out.write(self._ops(ops, "compiled"))


def _make_mode(capture: OpCapture) -> Any:
    """The recording dispatch mode (defined here: it needs torch, imported late).

    Note [Capture cost]
    A Python dispatch mode costs every call a trip through Python (about 3 us on
    the 2-core CI machine), and following a composite kernel costs its inner calls
    the same again: ``unbind`` of a 1024-row tensor reaches the recorder 1,025
    times, ``abs`` on emu three times (``abs``, ``empty``, ``abs.out``). That is
    the floor of this design; what the recorder adds per call on top is kept to
    one dict lookup for the op and one for its (op, dtypes) statistics:

    - ops are keyed by ``id(func)`` (an ``OpOverload``'s ``__hash__`` is Python
      code, and a tuple key hashes it again on every lookup: five or six times per
      call before); ``_Op`` keeps the overload alive, so its id is never reused;
    - per (op, dtypes): ``[calls, largest elements, returned once]`` in one list,
      mutated in place, where counts, sizes and the ends set were three lookups;
    - a tensor's device is read only when it is not on the CPU (``Tensor.device``
      builds a ``torch.device`` per call, ``is_cpu`` does not), and then looked up
      in a small dict of devices seen (``device.type`` builds a string per call:
      325 ns against 140 ns);
    - Dynamo: torch wraps every mode's ``__torch_dispatch__`` in
      ``torch._disable_dynamo``, two Python frames per call (a lazy look-up, then
      Dynamo's ``DisableContext``, which also asks for the compile stance and
      whether it is exporting). The recorder opts out (``_should_skip_dynamo``)
      and does the same in two C calls (``_dynamo_hooks``): Dynamo runs the frames
      of ``__torch_dispatch__`` as they are, and its frame hook is off until the
      call returns, so no frame of the recorder is compiled (a test printing a
      device tensor at a graph break reaches the recorder with the hook set).
      Where torch has not both, its wrapper stays;
    - the kernel is called through ``OpOverload._op``, without the Python frame
      of ``OpOverload.__call__`` (a subclass of ``OpOverload`` is called as is);
    - a composite kernel is followed with the mode pushed back on torch's dispatch
      stack directly: ``with self`` re-saves the mode flags, which inside
      ``__torch_dispatch__`` are already set by the test's own ``with``;
    - a call whose lists hold more arguments than an example may carry
      (``stack`` of 1,024 slices) is not encoded at all (``calls.too_many``);
    - a variant the config skips, where no scope's teardown follows, runs no code
      (``isolation.runs_no_code``): the recorder is not entered for it at all;
      its records (a device-branch flag, the stop) are written as before.

    Measured on real ``test_unary_ufuncs.py`` (bench/README.md, "Op capture"):
    the test bodies of ``test_batch_vs_slicing`` cost 2.1x plain under the old
    recorder and 2.0x now, of which following composite kernels alone (the floor
    above) is 1.7-1.8x. The bigger costs on that file were per variant, not per
    call: ``_branches_on_device`` and the timeout watchdog (plugin/isolation.py).
    The Dynamo, ``_op`` and device look-ups above took 15-20% more off each call
    (bench/capture_calls.py); the captured bodies stay about 2x plain, most of it
    torch's crossing from C++ to Python and back per call, not the bookkeeping.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    base: Any = TorchDispatchMode  # untyped: torch's own annotations are not strict-clean
    device = capture.core.device.name if capture.core.device else "privateuseone"
    tensor = torch.Tensor
    sig_names: dict[tuple[Any, ...], tuple[str, ...]] = {}  # dtypes -> distinct names, sorted
    push = getattr(torch._C, "_push_on_torch_dispatch_stack", None)
    pop = getattr(torch._C, "_pop_torch_dispatch_stack", None)
    # Dynamo kept out of the recorder by the recorder itself (Note [Capture cost]);
    # None on a torch without what that needs: torch's own wrapper then
    skip_frame, set_eval_frame = _dynamo_hooks(torch)
    no_dynamo: Any = set_eval_frame or (lambda callback: None)
    overload = getattr(getattr(torch, "_ops", None), "OpOverload", None)

    on_device: dict[Any, bool] = {}  # torch.device -> whether it is the device under test

    def ours(d: Any) -> bool:
        """Whether ``d``, a tensor's ``torch.device`` not in ``on_device`` yet, is
        the device under test (``device.type`` builds a string per call; the hot
        path looks the device up in ``on_device`` instead)."""
        o: bool = d.type == device
        if len(on_device) < 64:  # devices are few; bounded all the same
            on_device[d] = o
        return o

    def scan(items: Any, found: list[Any]) -> int:
        """Appends the dtypes of the tensors on the device among ``items`` (and in
        their lists) to ``found``, in argument order; returns their elements."""
        size = 0
        for a in items:
            if isinstance(a, tensor):
                if not a.is_cpu:
                    d = a.device
                    o = on_device.get(d)
                    if o or (o is None and ours(d)):
                        found.append(a.dtype)
                        size += a.numel()
            elif isinstance(a, (list, tuple)):
                for b in a:
                    if isinstance(b, tensor) and not b.is_cpu:
                        d = b.device
                        o = on_device.get(d)
                        if o or (o is None and ours(d)):
                            found.append(b.dtype)
                            size += b.numel()
        return size

    def scan_kwargs(kwargs: dict[str, Any], found: list[Any]) -> tuple[int, bool]:
        """``scan`` of the keyword arguments; a ``device=`` on the device (and its
        factory's ``dtype=``) counts as on the device."""
        on = False
        d = kwargs.get("device")
        if d is not None and getattr(d, "type", str(d).partition(":")[0]) == device:
            on = True
            dt = kwargs.get("dtype")
            if dt is not None:
                found.append(dt)
        size = 0
        for k, v in kwargs.items():
            # most keyword arguments are no tensors (``memory_format``, ``dtype``...)
            if k != "device" and isinstance(v, (tensor, list, tuple)):
                size += scan((v,), found)
        return size, on

    def example(args: Any, kwargs: dict[str, Any]) -> str | None:
        try:
            return encode_call(args, kwargs, device)
        except Exception:  # never let writing an example break a test
            return None

    keys = torch._C.DispatchKey

    def composite_key(func: Any) -> Any:
        """The composite kernel a call on the device runs, when the backend has none."""
        name = func.name()
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        if has(name, "PrivateUse1") or name in DATA_TRANSFER:
            return None  # Note [Tensors made from Python data]: recorded, not followed
        for k in ("CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd"):
            if has(name, k):
                return getattr(keys, k)
        return None

    class _Op:
        """One overload as the recorder knows it (Note [Capture cost])."""

        __slots__ = ("following", "func", "key", "name", "run")

        def __init__(self, func: Any) -> None:
            self.func = func  # keeps id(func) from being reused
            self.name: str = func.name()
            # the kernel entry ``OpOverload.__call__`` calls, without its Python frame
            # (a subclass may call otherwise: it is called as it is)
            run = getattr(func, "_op", None) if type(func) is overload else None
            self.run: Any = run if callable(run) else func
            self.key: Any = composite_key(func)
            self.following = False  # its composite kernel is being followed

    ops: dict[int, _Op] = {}  # id(OpOverload) -> _Op

    class Recording(base):  # type: ignore[misc]
        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True  # compile as usual; graphs come from the aot_graphs log

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps ``__torch_dispatch__`` in two Python layers that switch
            # Dynamo's frame hook off for the call; the recorder does it itself
            # where it can (Note [Capture cost])
            return set_eval_frame is None

        def start(self) -> None:
            self.called: set[int] = set()  # ops (by id) the variant called
            # (op id, dtypes as torch passed them) -> [calls, elements of the largest
            # call, whether a call of it returned already]
            self.stats: dict[tuple[int, tuple[Any, ...]], list[Any]] = {}
            self.signed: set[tuple[int, tuple[str, ...]]] = set()  # (op, signature) written
            self.stop: tuple[str | None, str | None] = (None, None)
            # (op, dtypes) -> the example of its largest call when that is not the
            # first call (written at the end, Note [Call examples])
            self.largest: dict[tuple[int, tuple[Any, ...]], str] = {}
            # (op, dtypes) and the exception class a call of it raised: one example
            # each (Note [Call examples]); ``stats[call][2]`` is the same for returning
            self.ends: set[tuple[tuple[int, tuple[Any, ...]], Any]] = set()
            self.ended_once: set[tuple[int, tuple[Any, ...]]] = set()

        def largest_calls(self) -> list[tuple[str, str]]:
            return [(ops[f].name, spec) for (f, _), spec in self.largest.items()]

        def counts_by_name(self) -> dict[str, int]:
            out: dict[str, int] = {}
            for (f, _), st in self.stats.items():
                name = ops[f].name
                out[name] = out.get(name, 0) + st[0]
            return out

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            prior = no_dynamo(None)
            try:
                kwargs = kwargs or {}
                op = ops.get(id(func))
                if op is None:
                    op = ops[id(func)] = _Op(func)
                found: list[Any] = []
                size = scan(args, found)
                on = False
                if kwargs:
                    more, on = scan_kwargs(kwargs, found)
                    size += more
                st: list[Any] | None = None
                call: tuple[int, tuple[Any, ...]] | None = None
                if found or on:  # calls off the device are neither recorded nor followed
                    if op.key is not None and not op.following:
                        # no kernel of the backend's own: the backend receives what the
                        # composite kernel calls, so follow it (with the recorder on). A
                        # composite kernel that dispatches its own op again (``detach``)
                        # reaches the recorder once more: that call is recorded and run.
                        return self._follow(op, args, kwargs)
                    dtypes = tuple(found)
                    call = (id(func), dtypes)
                    st = self.stats.get(call)
                    if st is None:
                        st = self.stats[call] = [1, size, False]
                        self._first(op, call, dtypes, args, kwargs)
                    else:
                        st[0] += 1
                        if size > st[1]:
                            st[1] = size
                            spec = example(args, kwargs)
                            if spec is not None:
                                self.largest[call] = spec
                try:
                    out = op.run(*args, **kwargs)
                except Exception as e:
                    if self.stop[0] is None:  # the innermost op: the one whose kernel raised
                        self.stop = (op.name, type(e).__name__)
                    if call is not None:
                        self.ended(call, type(e), args, kwargs)
                    raise
                if call is not None and st is not None and not st[2]:
                    self.ended(call, None, args, kwargs)
                return out
            finally:
                no_dynamo(prior)

        def _follow(self, op: _Op, args: Any, kwargs: dict[str, Any]) -> Any:
            op.following = True
            try:
                if push is None or pop is None:  # a torch without them
                    with self:
                        return op.func._op_dk(op.key, *args, **kwargs)
                push(self)
                try:
                    return op.func._op_dk(op.key, *args, **kwargs)
                finally:
                    pop(None)
            finally:
                op.following = False

        def _first(
            self,
            op: _Op,
            call: tuple[int, tuple[Any, ...]],
            dtypes: tuple[Any, ...],
            args: Any,
            kwargs: dict[str, Any],
        ) -> None:
            """The first call of (op, dtypes) in this variant: its op, signature and
            example are written before it runs (Notes [Op capture], [Call dtypes])."""
            if call[0] not in self.called:
                self.called.add(call[0])
                capture.first_call(op.name)
            sig = sig_names.get(dtypes)
            if sig is None:
                sig = sig_names[dtypes] = tuple(sorted({str(d)[6:] for d in dtypes}))
            if sig and (call[0], sig) not in self.signed:  # (f32, f32) and (f32,): one
                self.signed.add((call[0], sig))
                capture.first_dtypes(op.name, list(sig))
            spec = example(args, kwargs)
            if spec is not None:
                capture.example(op.name, spec)

        def ended(
            self,
            call: tuple[int, tuple[Any, ...]],
            how: Any,
            args: Any,
            kwargs: dict[str, Any],
        ) -> None:
            """The first call of ``call`` to end this way (returned: ``how`` None, or
            raised an exception of class ``how``) is written down as an example when
            it is not the op's first call (already written; Note [Call examples])."""
            st = self.stats[call]
            if how is None:
                if st[2]:
                    return
                st[2] = True
            elif (call, how) in self.ends:
                return
            else:
                self.ends.add((call, how))
            if call not in self.ended_once:
                self.ended_once.add(call)
                if st[0] == 1:
                    return  # the op's first call: its example is written already
            spec = example(args, kwargs)
            if spec is not None:
                capture.example(ops[call[0]].name, spec)

    if set_eval_frame is not None:
        skip_frame(Recording.__torch_dispatch__.__code__)
    mode: Any = Recording()
    mode.start()
    return mode


def _dynamo_hooks(torch: Any) -> tuple[Any, Any]:
    """``(skip_frame(code), set_eval_frame(callback))`` from torch's C part, or
    ``(None, None)`` where this torch has not both (Note [Capture cost]).

    ``skip_frame``: Dynamo runs frames of that code as they are (as it runs its
    own files) instead of compiling them; ``set_eval_frame(None)``: no frame the
    call makes is compiled either, until the previous hook is set back. What
    torch's wrapper of ``__torch_dispatch__`` does, in two C calls."""
    ev = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    set_eval_frame = getattr(ev, "set_eval_frame", None)
    set_strategy = getattr(ev, "set_code_exec_strategy", None)
    try:
        action = ev._FrameAction  # type: ignore[union-attr]
        strategy = ev._FrameExecStrategy(action.SKIP, action.DEFAULT)  # type: ignore[union-attr]
    except Exception:  # another torch
        return None, None
    if not callable(set_eval_frame) or not callable(set_strategy):
        return None, None

    def skip_frame(code: Any) -> None:
        set_strategy(code, strategy)

    return skip_frame, set_eval_frame


def _watch_printing(capture: OpCapture) -> Any:
    """Note [Printed tensors]
    Printing a device tensor (``repr``, ``str``, an f-string in a test's message) runs
    tensor ops on the device: torch's formatter takes ``masked_select``, ``abs``,
    ``ne``... of it and converts it to float64 there (torch 2.13 spares only MPS, MAIA
    and XPU without fp64). A backend without float64 fails such a test in the
    formatting, not in the op under test; upstream's ``test_reference_numerics_*``
    build their message from the tensors eagerly when the input is small. torch
    prints with every dispatch mode switched off (``torch._tensor_str._str`` runs
    under ``_disable_current_modes()``), so the recorder would never see those calls
    and neither selection nor the replay could know them. While a test runs under the
    capture, ``_str`` of a tensor on the device is replaced by the same steps with the
    recorder pushed back on the dispatch stack: the calls printing makes are recorded
    (ops, dtypes, examples) like any other, and the printed text is torch's own.
    Other modes stay off, as in torch's ``_str``. Returns the undo, or None where
    this torch's printer does not have the shape this relies on (then printing is
    not recorded, as before)."""
    import torch
    import torch._tensor_str as ts
    from torch.utils._python_dispatch import _disable_current_modes

    original = getattr(ts, "_str", None)
    intern = getattr(ts, "_str_intern", None)
    push = getattr(torch._C, "_push_on_torch_dispatch_stack", None)
    pop = getattr(torch._C, "_pop_torch_dispatch_stack", None)
    no_functorch = getattr(torch._C, "_DisableFuncTorch", None)
    if not (callable(original) and callable(intern) and push and pop and no_functorch):
        return None
    device = capture.core.device.name if capture.core.device else "privateuseone"

    def _str(self: Any, *, tensor_contents: Any = None) -> Any:
        mode = capture.mode
        if (
            not capture.recording
            or mode is None
            or not isinstance(self, torch.Tensor)
            or self.is_cpu
            or self.device.type != device
        ):
            return original(self, tensor_contents=tensor_contents)
        with torch.no_grad(), _disable_current_modes():
            guard = no_functorch()  # noqa: F841  (as torch's own _str)
            push(mode)
            try:
                return intern(self, tensor_contents=tensor_contents)
            finally:
                pop(None)

    ts._str = _str

    def undo() -> None:
        if ts._str is _str:
            ts._str = original

    return undo


class _GraphLog(logging.Handler):
    def __init__(self, capture: OpCapture) -> None:
        super().__init__(logging.DEBUG)
        self.capture = capture

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.capture.compiled_graph(record.getMessage())
        except Exception:  # never let a log line break a test
            pass


def _aot_graph_loggers() -> list[logging.Logger]:
    """AOT Autograd's ``aot_graphs`` artifact loggers (one per module that logs graphs)."""
    import torch._functorch.aot_autograd  # noqa: F401  (creates them)

    names = [n for n in logging.root.manager.loggerDict if n.endswith(".__aot_graphs")]
    return [logging.getLogger(n) for n in sorted(names)]


def _watch_aot_graphs(capture: OpCapture) -> logging.Handler | None:
    try:
        import torch._logging

        torch._logging.set_logs(aot_graphs=True)  # type: ignore[attr-defined]
        loggers = _aot_graph_loggers()
    except Exception:  # an older or newer torch without them: eager capture only
        return None
    handler = _GraphLog(capture)
    for log in loggers:
        log.addHandler(handler)
    return handler


def _unwatch_aot_graphs(handler: logging.Handler) -> None:
    import torch._logging

    for log in _aot_graph_loggers():
        log.removeHandler(handler)
    torch._logging.set_logs()  # type: ignore[attr-defined]
