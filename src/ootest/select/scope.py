"""Stage 1, scope: which test files are worth analysing for a backend, and why.

Note [Selection scope]
``ootest select scope --device D`` asks the backend (in a child process: only
it imports torch, see ``ootest.plugin.probe``) which extension points it hooks:

==============  ===================================================================
area            hooked when
==============  ===================================================================
ops             it registers PrivateUse1 kernels (or a PrivateUse1 fallback)
autograd        the same (PyTorch's generic autograd kernels run on its ops; own
                AutogradPrivateUse1 kernels are reported)
compile         an Inductor codegen for the device, a dynamo backend registered
                from outside torch, or a ``torch_dynamo_backends`` entry point
distributed     a ProcessGroup backend for the device
                (``torch.distributed.Backend.default_device_backend_map``)
sparse          SparsePrivateUse1 / SparseCsrPrivateUse1 kernels
quantized       QuantizedPrivateUse1 kernels
nested          NestedTensorPrivateUse1 kernels
==============  ===================================================================

Every test file under the roots (read with ``ast``, never imported) gets an
area from its folder, name and imports (``AREA_RULES``), and is in scope when
its area is hooked and, for the device-generic areas (ops, autograd, sparse,
quantized, nested), it has tests PyTorch instantiates for the device
(``instantiate_device_type_tests`` not limited away by ``only_for``/
``except_for`` or a class decorator such as ``@onlyCUDA``) or names the
privateuse1 device itself. The team's preferences then win, the most specific
first: ``files``, then ``folders`` (the longest prefix), then ``areas``; an
exclusion wins a tie. ``notes`` (free text) is kept for a model judge and is
unused without one. The output YAML lists each file with its area and reason.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ootest.atomic import write_output
from ootest.errors import UserError
from ootest.select.gates import gate
from ootest.untrusted import env_secrets, for_terminal, redact, without_secrets

AREAS = ("ops", "autograd", "compile", "distributed", "sparse", "quantized", "nested")
#: Areas whose tests are device-generic: a file counts only with tests for the device.
DEVICE_GENERIC = ("ops", "autograd", "sparse", "quantized", "nested")


@dataclass(frozen=True)
class AreaRule:
    area: str
    folders: tuple[str, ...] = ()  # a folder of the file key with this name
    name: str = ""  # a regular expression searched in the file name
    imports: tuple[str, ...] = ()  # modules (prefixes) it imports


#: How a file gets its area: the first rule that matches; none matches: ``ops``.
AREA_RULES = (
    AreaRule(
        "distributed",
        ("distributed",),
        r"^test_c10d|distributed",
        ("torch.distributed", "torch.testing._internal.common_distributed"),
    ),
    AreaRule(
        "compile",
        ("inductor", "dynamo", "export", "compiled_autograd"),
        r"^test_(compile|inductor|dynamo)",
        ("torch._inductor", "torch.testing._internal.inductor_utils"),
    ),
    AreaRule(
        "quantized",
        ("quantization",),
        r"quantiz",
        ("torch.ao.quantization", "torch.testing._internal.common_quantization"),
    ),
    AreaRule("sparse", ("sparse",), r"^test_sparse"),
    AreaRule("nested", (), r"^test_nested"),
    AreaRule("autograd", ("autograd",), r"^test_autograd"),
)


# ------------------------------------------------------------------ detection
@dataclass(frozen=True)
class Detection:
    """What the backend registered (from the probe, or a saved JSON)."""

    device: str
    name: str
    torch: str = ""
    torch_git: str = ""
    keys: dict[str, list[str] | None] = field(default_factory=dict)
    fallback: bool = False
    compile: list[str] = field(default_factory=list)
    distributed: str | None = None
    #: every op that can run on the device and how (Note [What a backend
    #: supports]); None: a detection saved before ootest probed ops
    ops: dict[str, str] | None = None
    dtypes: list[str] | None = None  # what the device module declares, if anything

    def kernels(self, *keys: str) -> int:
        return sum(len(self.keys.get(k) or ()) for k in keys)

    def hook(self, area: str) -> str | None:
        """Why ``area`` is hooked, or None."""
        n = self.kernels("PrivateUse1")
        ops = f"{n} PrivateUse1 kernels" + (" and a PrivateUse1 fallback" if self.fallback else "")
        if area == "ops":
            return f"the backend registers {ops}" if n or self.fallback else None
        if area == "autograd":
            if not (n or self.fallback):
                return None
            own = self.kernels("AutogradPrivateUse1")
            if own:
                return f"the backend registers {own} AutogradPrivateUse1 kernels and {ops}"
            return f"PyTorch's generic autograd kernels run on its {ops}"
        if area == "compile":
            return "torch.compile: " + "; ".join(self.compile) if self.compile else None
        if area == "distributed":
            if self.distributed is None:
                return None
            return f"ProcessGroup backend {self.distributed!r} for {self.name!r}"
        key = {
            "sparse": ("SparsePrivateUse1", "SparseCsrPrivateUse1"),
            "quantized": ("QuantizedPrivateUse1",),
            "nested": ("NestedTensorPrivateUse1",),
        }[area]
        k = self.kernels(*key)
        return f"the backend registers {k} {'/'.join(key)} kernels" if k else None

    def missing(self, area: str) -> str:
        """Why ``area`` is not hooked (for the reason of an excluded file)."""
        return {
            "ops": "the backend registers no PrivateUse1 kernel",
            "autograd": "the backend registers no PrivateUse1 kernel",
            "compile": f"no torch.compile backend is registered for {self.name!r} "
            "(no Inductor codegen, dynamo backend or entry point)",
            "distributed": f"no ProcessGroup backend is registered for {self.name!r}",
            "sparse": "no SparsePrivateUse1 or SparseCsrPrivateUse1 kernel",
            "quantized": "no QuantizedPrivateUse1 kernel",
            "nested": "no NestedTensorPrivateUse1 kernel",
        }[area]


def detection_from(data: dict[str, Any], where: str) -> Detection:
    try:
        return Detection(
            device=str(data["device"]),
            name=str(data["name"]),
            torch=str(data.get("torch", "")),
            torch_git=str(data.get("torch_git", "")),
            keys={str(k): (list(v) if v is not None else None) for k, v in data["keys"].items()},
            fallback=bool(data.get("fallback", False)),
            compile=[str(c) for c in data.get("compile", [])],
            distributed=data.get("distributed"),
            ops=_str_map(data.get("ops")),
            dtypes=[str(d) for d in data["dtypes"]] if data.get("dtypes") is not None else None,
        )
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise UserError(
            f"{where}: expected a detection result written by 'ootest select scope "
            f"--save-detected' (device, name, keys, ...); found none of {e}"
        ) from None


def _str_map(data: Any) -> dict[str, str] | None:
    if data is None:
        return None
    return {str(k): str(v) for k, v in dict(data).items()}


# Note [The probe's deadline]
# The probe imports torch and the backend in a child process; a backend whose
# import never returns hung `select run`, `select scope` and `ops missing/enable
# --device` with no output (for 900 s). The child says on stderr what it is doing
# (STAGE lines); the parent says once what it waits for, again every
# PROBE_TICK seconds, and at the deadline (OOTEST_PROBE_TIMEOUT, default
# PROBE_TIMEOUT) kills the child's whole process group and names the stage it
# was in. Output goes to files, not pipes: a grandchild that keeps a pipe open
# cannot make the parent wait past the deadline.
PROBE_TIMEOUT = 300.0
PROBE_TIMEOUT_VAR = "OOTEST_PROBE_TIMEOUT"
PROBE_TICK = 15.0
#: The most of the probe's output read (its op list is ~200 KB).
_PROBE_OUTPUT = 64 * 2**20


def probe_timeout() -> float:
    """The probe's deadline in seconds (Note [The probe's deadline])."""
    raw = os.environ.get(PROBE_TIMEOUT_VAR)
    if raw is None or not raw.strip():
        return PROBE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86_400:
        raise UserError(
            f"{PROBE_TIMEOUT_VAR}={raw[:40]!r}: expected the probe's deadline in seconds "
            f"(more than 0, at most 86400); unset it for the default {PROBE_TIMEOUT:.0f}"
        )
    return value


def _read_capped(fh: Any) -> str:
    fh.seek(0)
    data: bytes = fh.read(_PROBE_OUTPUT)
    return data.decode("utf-8", "replace")


def _stage(stderr: str) -> str:
    from ootest.device.activate import STAGE

    stages = [x[len(STAGE) :] for x in stderr.splitlines() if x.startswith(STAGE)]
    return stages[-1] if stages else "starting Python"


def detect(
    device: str,
    timeout: float | None = None,
    *,
    say: Callable[[str], None] | None = None,
) -> Detection:
    """Probe ``device`` in a child process (the only one that imports torch), within
    ``timeout`` seconds (default: :func:`probe_timeout`; Note [The probe's deadline])."""
    import signal
    import tempfile
    import time

    from ootest.device import note
    from ootest.htmlpage import visible

    tell: Callable[[str], None] = say or note
    deadline = probe_timeout() if timeout is None else timeout
    cmd = [sys.executable, "-m", "ootest.plugin.probe", device]
    how = f"{PROBE_TIMEOUT_VAR}={deadline:g}" if timeout is None else f"{deadline:g} s"
    tell(f"probing the backend {device} in a child process (deadline {deadline:g} s: {how})")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # the backend's code runs there: no secret of ours (Note [Secrets in the environment])
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
            env=without_secrets(),
        )  # fmt: skip
        started = time.monotonic()
        tick = min(PROBE_TICK, max(1.0, deadline / 4))
        try:
            while True:
                left = deadline - (time.monotonic() - started)
                if left <= 0:
                    break
                try:
                    proc.wait(min(tick, left))
                    break
                except subprocess.TimeoutExpired:
                    waited = time.monotonic() - started
                    if waited < deadline:
                        stage = visible(_stage(_read_capped(err)))
                        tell(f"probe: still {stage} ({waited:.0f} s of {deadline:g} s)")
        finally:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        stdout, stderr = _read_capped(out), _read_capped(err)
    if proc.returncode is not None and proc.returncode < 0 and not stdout.strip():
        killed = proc.returncode == -signal.SIGKILL and time.monotonic() - started >= deadline
        if killed:
            raise UserError(
                f"--device {device}: the probe gave no answer within {deadline:g} s; it was "
                f"still {visible(_stage(stderr))}; check that it returns (python -c 'import "
                f"torch{_module_of(device)}'), or give it longer with {PROBE_TIMEOUT_VAR}=SECONDS"
            )
    from ootest.device.activate import STAGE

    lines = [x for x in stderr.strip().splitlines() if not x.startswith(STAGE)]
    if proc.returncode != 0:
        # the backend's words: a credential in them is not repeated (issue 35 item 9)
        tail = redact((lines or ["no output"])[-1], env_secrets())
        raise UserError(
            f"--device {device}: cannot load the backend to probe it: {for_terminal(tail[:300])}"
        )
    try:
        data = json.loads(stdout)
    except ValueError:
        raise UserError(
            f"--device {device}: the probe printed no result (its output: {stdout[-200:]!r})"
        ) from None
    return detection_from(data, "probe")


def _module_of(device: str) -> str:
    from ootest.device.activate import DeviceSpec

    try:
        spec = DeviceSpec.parse(device)
    except UserError:
        return ""
    return f", {spec.target}" if spec.kind == "module" else ""


# ------------------------------------------------------------------ preferences
@dataclass(frozen=True)
class Selection:
    areas: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prefs:
    include: Selection = Selection()
    exclude: Selection = Selection()
    notes: str = ""
    source: str = ""


def read_prefs(path: Path) -> Prefs:
    """The preferences file; one ``file:line: key: message`` error for anything off."""
    import yaml

    from ootest.atomic import read_text_bounded
    from ootest.config.smallyaml import load

    text = read_text_bounded(path, "--prefs", limit=16 * 2**20)
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise UserError(f"{where}: expected YAML; found a syntax error; fix the syntax") from None
    data = load(text, str(path), unique_keys=True)  # bounded; a key given twice is an error
    if data is None:
        return Prefs(source=str(path))

    def fail(keys: tuple[str | int, ...], msg: str) -> UserError:
        line = _line_of(node, keys)
        dotted = ".".join(str(k) for k in keys)
        return UserError(f"{path}:{line}: {dotted}: {msg}" if dotted else f"{path}:{line}: {msg}")

    if not isinstance(data, dict):
        raise fail((), "expected a mapping with include, exclude, notes")
    for k in data:
        if k not in ("include", "exclude", "notes"):
            raise fail((str(k),), f"unknown key {k!r}; expected one of include, exclude, notes")
    sels = {}
    for part in ("include", "exclude"):
        raw = data.get(part) or {}
        if not isinstance(raw, dict):
            raise fail((part,), "expected a mapping with areas, folders, files")
        vals: dict[str, tuple[str, ...]] = {}
        for k, v in raw.items():
            if k not in ("areas", "folders", "files"):
                raise fail((part, str(k)), f"unknown key {k!r}; expected areas, folders, files")
            items = [v] if isinstance(v, str) else v
            if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
                raise fail((part, k), "expected a list of strings")
            for i, x in enumerate(items):
                if k == "areas" and x not in AREAS:
                    raise fail(
                        (part, k, i), f"unknown area {x!r}; expected one of {', '.join(AREAS)}"
                    )
            vals[k] = tuple(x.strip().strip("/") if k == "folders" else x.strip() for x in items)
        sels[part] = Selection(**vals)
    notes = data.get("notes") or ""
    if not isinstance(notes, str):
        raise fail(("notes",), "expected free text (a string) for a model judge")
    return Prefs(sels["include"], sels["exclude"], notes.strip(), str(path))


def _line_of(node: Any, keys: tuple[str | int, ...]) -> int:
    import yaml

    line = 1
    for k in keys:
        if isinstance(node, yaml.MappingNode):
            pair = next((kv for kv in node.value if kv[0].value == k), None)
            if pair is None:
                break
            node = pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(k, int) and k < len(node.value):
            node = node.value[k]
        else:
            break
        line = node.start_mark.line + 1
    return line


# ------------------------------------------------------------------ classifying
@dataclass(frozen=True)
class FileInfo:
    """What scope needs of one test file (from its ``ast`` facts)."""

    key: str
    imports: tuple[str, ...] = ()
    device_classes: tuple[str, ...] = ()  # instantiated for the device
    limited: tuple[str, ...] = ()  # device-generic classes kept off it, with why
    names_device: bool = False  # the text names privateuse1 itself
    error: str | None = None


@dataclass(frozen=True)
class Scoped:
    key: str
    area: str
    in_scope: bool
    why: str


def file_info(key: str, data: bytes, device_name: str) -> FileInfo:
    from ootest.memory._static import parse_file

    facts = parse_file(key, data)
    if facts.error:
        return FileInfo(key, error=facts.error)
    imports = []
    for imp in facts.imports:
        imports.append(imp.module)
        imports += [f"{imp.module}.{n}" for n in imp.names if n != "*"]
    ok: list[str] = []
    limited: list[str] = []
    for k in facts.classes:
        if k.form != "device" or not k.tests:
            continue
        why = _limited(k, device_name)
        if why:
            limited.append(f"{k.name}: {why}")
        else:
            ok.append(k.name)
    low = data.lower()
    names = b"privateuse1" in low or b"private_use1" in low
    return FileInfo(key, tuple(imports), tuple(ok), tuple(limited), names)


def _limited(k: Any, device_name: str) -> str | None:
    for d in k.decorators:
        if gate(str(d), device_name) is not None:
            return f"@{d.name} keeps it off the device"
    mine = {"privateuse1", device_name.lower()}
    for inst in k.instantiations:
        if not inst.call.endswith("instantiate_device_type_tests"):
            continue
        try:  # the arguments' source, with or without their parentheses
            call = ast.parse(f"f({inst.args})", mode="eval").body
        except SyntaxError:
            try:
                call = ast.parse(f"f{inst.args}", mode="eval").body
            except SyntaxError:
                continue
        if not isinstance(call, ast.Call):
            continue
        for kw in call.keywords:
            devices = _strings(kw.value)
            if devices is None:
                continue
            if kw.arg == "only_for" and not mine & devices:
                return f"instantiated only for {', '.join(sorted(devices))}"
            if kw.arg == "except_for" and mine & devices:
                return "instantiated except for it"
    return None


def _strings(node: ast.expr) -> set[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value.lower()}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        out = set()
        for e in node.elts:
            if not (isinstance(e, ast.Constant) and isinstance(e.value, str)):
                return None
            out.add(e.value.lower())
        return out
    return None


def area_of(info: FileInfo) -> str:
    parts = info.key.split("/")
    folders, name = parts[:-1], parts[-1]
    for rule in AREA_RULES:
        if any(f in folders for f in rule.folders):
            return rule.area
        if rule.name and re.search(rule.name, name):
            return rule.area
        if any(i == m or i.startswith(m + ".") for i in info.imports for m in rule.imports):
            return rule.area
    return "ops"


def classify(info: FileInfo, det: Detection, prefs: Prefs) -> Scoped:
    """Whether one test file is in scope, and why (Note [Selection scope]); pure."""
    area = area_of(info)
    found = _detected(info, area, det)
    pref = _preferred(info.key, area, prefs)
    if pref is None:
        return Scoped(info.key, area, found[0], found[1])
    keep, why = pref
    return Scoped(info.key, area, keep, f"{why}; detection: {found[1]}")


def _detected(info: FileInfo, area: str, det: Detection) -> tuple[bool, str]:
    hook = det.hook(area)
    if hook is None:
        return False, det.missing(area)
    if info.error:  # upstream may well run it (newer syntax): unknown means run
        return True, f"it does not parse here ({info.error}): its tests cannot be read, kept in"
    if area not in DEVICE_GENERIC:
        return True, hook
    if info.device_classes:
        return True, f"tests instantiated for the device ({', '.join(info.device_classes)}); {hook}"
    if info.limited:
        return False, "its device-generic tests are kept off the device (" + "; ".join(
            info.limited
        ) + ")"
    if info.names_device:
        return True, f"it names the privateuse1 device itself; {hook}"
    return False, "no tests instantiated for devices: they run on the CPU only"


def _preferred(key: str, area: str, prefs: Prefs) -> tuple[bool, str] | None:
    src = prefs.source or "preferences"
    if key in prefs.exclude.files:
        return False, f"excluded by {src} (exclude.files)"
    if key in prefs.include.files:
        return True, f"included by {src} (include.files)"
    best: tuple[int, int, str] | None = None  # (prefix length, exclude first, folder)
    for keep, folders in ((0, prefs.exclude.folders), (1, prefs.include.folders)):
        for f in folders:
            if key == f or key.startswith(f + "/"):
                cand = (len(f), -keep, f)
                if best is None or cand > best:
                    best = cand
    if best is not None:
        keep = best[1] == -1
        what = "include" if keep else "exclude"
        verb = "included" if keep else "excluded"
        return keep, f"{verb} by {src} ({what}.folders: {best[2]})"
    if area in prefs.exclude.areas:
        return False, f"excluded by {src} (exclude.areas: {area})"
    if area in prefs.include.areas:
        return True, f"included by {src} (include.areas: {area})"
    return None


# ------------------------------------------------------------------ output
def render_scope(det: Detection, prefs: Prefs, roots: list[str], scoped: list[Scoped]) -> str:
    import yaml

    inside = [s for s in scoped if s.in_scope]
    outside = [s for s in scoped if not s.in_scope]
    detected = {
        "name": det.name,
        "torch": det.torch + (f" ({det.torch_git[:12]})" if det.torch_git else ""),
        "kernels": {k: len(v) if v is not None else None for k, v in sorted(det.keys.items())},
        "fallback": det.fallback,
        "compile": list(det.compile),
        "distributed": det.distributed,
    }
    areas = {}
    for a in AREAS:
        hook = det.hook(a)
        areas[a] = {"hooked": hook is not None, "why": hook or det.missing(a)}
    doc: dict[str, Any] = {
        "device": det.device,
        "roots": roots,
        "detected": detected,
        "areas": areas,
        "preferences": {
            "file": prefs.source or None,
            "include": {k: list(v) for k, v in asdict(prefs.include).items() if v},
            "exclude": {k: list(v) for k, v in asdict(prefs.exclude).items() if v},
            "notes": prefs.notes or None,
        },
        "files": [{"path": s.key, "area": s.area, "why": s.why} for s in inside],
        "excluded": [{"path": s.key, "area": s.area, "why": s.why} for s in outside],
    }
    per = Counter(s.area for s in inside)
    head = [
        f"# ootest select scope: the test files worth analysing for {det.device}, and why.",
        f"# {len(inside)} of {len(scoped)} test files in scope"
        + (": " + ", ".join(f"{n} {a}" for a, n in sorted(per.items())) if per else ""),
        "# Review it, then: ootest select run --scope THIS_FILE ...",
        "# preferences.notes is kept for a model judge; without one it is unused.",
    ]
    body = yaml.safe_dump(doc, sort_keys=False, width=4096, allow_unicode=True)
    return "\n".join(head) + "\n" + body


@dataclass(frozen=True)
class Scope:
    """What a scope file says: the files it puts in and the files it excluded.

    Only an excluded file is out of scope; a file the scope does not name (added
    upstream after it was written) is *unknown*, and unknown means run: it is in
    (``file in scope`` is true), and :meth:`unknown` counts it."""

    listed: frozenset[str]
    excluded: frozenset[str]

    def __contains__(self, file: object) -> bool:
        return file not in self.excluded

    def unknown(self, files: Iterable[str]) -> list[str]:
        """The file keys of ``files`` the scope neither lists nor excludes."""
        return sorted({f for f in files if f not in self.listed and f not in self.excluded})


def read_scope(path: Path) -> tuple[Scope, dict[str, str], str]:
    """(the scope, area per excluded file, the preferences' notes for a model
    judge) from the YAML ``select scope`` writes, or from a list of file keys
    (one a line: in scope; a line ``!KEY`` excludes one; no notes)."""

    from ootest.atomic import read_text_bounded
    from ootest.config.smallyaml import load

    text = read_text_bounded(path, "--scope", limit=16 * 2**20)
    try:
        data = load(text, str(path))
    except UserError:
        if text.lstrip().startswith(("files:", "excluded:", "{")):
            raise  # meant as YAML: say what is wrong with it
        data = None  # a list of file keys
    if isinstance(data, dict) and "files" in data:
        try:
            keys = {str(f["path"]) for f in data.get("files") or []}
            areas = {str(f["path"]): str(f.get("area") or "") for f in data.get("excluded") or []}
            notes = (data.get("preferences") or {}).get("notes") or ""
        except (TypeError, KeyError, AttributeError):
            raise UserError(
                f"--scope {path}: expected files: and excluded: lists of {{path, area, why}} "
                "as 'ootest select scope' writes them"
            ) from None
        return Scope(frozenset(keys), frozenset(areas)), areas, str(notes)
    lines = [x.strip() for x in text.splitlines() if x.strip() and not x.startswith("#")]
    out = frozenset(x[1:].strip() for x in lines if x.startswith("!"))
    return Scope(frozenset(x for x in lines if not x.startswith("!")), out), {}, ""


def _is_test_file(key: str) -> bool:
    name = key.rpartition("/")[2]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


@dataclass
class ScopeRun:
    """What ``select scope`` found: the backend, the preferences, and each test file
    of the roots in or out of scope with why."""

    detection: Detection
    prefs: Prefs
    roots: list[Path]
    scoped: list[Scoped]

    def text(self) -> str:
        """The scope file (YAML with a comment per decision)."""
        return render_scope(self.detection, self.prefs, [str(r) for r in self.roots], self.scoped)

    @property
    def inside(self) -> int:
        return sum(s.in_scope for s in self.scoped)


def scope_roots(roots: Iterable[Path]) -> list[Path]:
    """The folders to read: ``roots``, else ``$TORCH_ROOT/test``."""
    out = list(roots)
    if out:
        return out
    torch_root = os.environ.get("TORCH_ROOT")
    if not torch_root:
        raise UserError(
            "select scope: expected --root PATH (a folder of test files) or TORCH_ROOT "
            "set to a PyTorch checkout (then $TORCH_ROOT/test is read)"
        )
    out = [Path(torch_root) / "test"]
    if not out[0].is_dir():  # say where the path came from: no --root was given
        what = "is not a folder" if out[0].exists() else "does not exist"
        raise UserError(
            f"select scope: {out[0]} (from the TORCH_ROOT environment variable, "
            f"{torch_root}) {what}; expected a PyTorch checkout whose test/ folder holds "
            "the tests; set TORCH_ROOT to one, or pass --root PATH"
        )
    return out


def run_scope(
    roots: Iterable[Path],
    *,
    device: str | None = None,
    detected: Path | None = None,
    save_detected: Path | None = None,
    prefs: Path | None = None,
    warn: Callable[[str], None] = lambda line: None,
) -> ScopeRun:
    """Decide which test files of ``roots`` (default ``$TORCH_ROOT/test``) are in
    scope for the backend: probed live (``device``) or read from a saved probe
    (``detected``; ``device``, if given too, must be the one it names). Files that
    cannot be read are passed to ``warn`` before the probe starts."""
    from ootest.memory._files import discover, read_source

    paths = scope_roots(roots)
    chosen = read_prefs(prefs) if prefs else Prefs()
    skipped: list[str] = []  # Note [Only regular files inside the roots]
    files = [f for f in discover(paths, skipped) if _is_test_file(f.key)]  # before the probe
    for line in skipped:
        warn(line)
    if detected is not None:
        try:
            data = json.loads(detected.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"--detected {detected}: expected a JSON detection; {e}") from None
        det = detection_from(data, str(detected))
        if device and device != det.device:
            raise UserError(
                f"--detected {detected}: it was probed for {det.device}, not {device}; "
                "drop --device or probe again"
            )
    elif device:
        from ootest.device import check_device

        check_device(device)
        det = detect(device)
    else:
        raise UserError("select scope: expected --device emu[:PROFILE] or MODULE:NAME")
    if save_detected is not None:
        write_output(
            save_detected,
            json.dumps(asdict(det), sort_keys=True, indent=1) + "\n",
            "--save-detected",
        )
    scoped = [classify(file_info(f.key, read_source(f.path), det.name), det, chosen) for f in files]
    return ScopeRun(det, chosen, paths, scoped)
