"""The selection pipeline as calls: sources in, decisions out, files written.

Note [Selection pipeline]
``ootest select run|refine|enable`` and ``run --since`` are each one call here;
the CLI (``cli/select_cmd.py``) only maps its arguments onto :class:`Inputs`
and prints what comes back, so a Python user or a CI script runs the same
pipeline without it::

    from ootest.select.pipeline import Backend, Inputs, select, write

    sel = select(Inputs(memory=Path("mem.db"), ops=Path("ops.db"),
                        backend=Backend(device="emu:young")))
    done = write(sel, Path("suite.yaml"))  # the config and suite.evidence.jsonl

- :func:`select` gathers the evidence of every candidate (the memory, the
  variants dumps), decides it (Note [Selection rules]), asks the model judge if
  :attr:`Inputs.judge` is set, and returns a :class:`Selection`: the decisions
  with their evidence, nothing written;
- :func:`refine` is the same for a selected config and real runs (Note
  [Refinement]);
- :func:`write` renders a :class:`Selection` into the config and its evidence
  sidecar (Note [Canonical variant IDs] names the variants) and returns the
  counts the CLI prints;
- :func:`upgrade` (``--since``) and :func:`enable` re-decide part of a config
  (Note [Incremental selection]) and return the ``since.Outcome`` to write.

What the CLI prints to stderr while deciding (the scope's unknown files, the
judge's line, refine's counts) is returned in ``notes``, in order.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from ootest.errors import UserError
from ootest.llm import LLMSettings
from ootest.select.fresh import DeltaCapture
from ootest.select.gather import Candidate, Sources, Support
from ootest.select.rules import Decision, Evidence
from ootest.select.since import Judging, Outcome, root_var
from ootest.select.writer import Precision

__all__ = [
    "Backend",
    "Inputs",
    "JudgeSettings",
    "Selection",
    "Written",
    "candidates",
    "enable",
    "judge_settings",
    "refine",
    "select",
    "support",
    "target_of",
    "upgrade",
    "write",
]

Row = tuple[Evidence, Decision]


@dataclass(frozen=True)
class Backend:
    """Where the backend's ops and dtypes come from (Note [Backend capabilities])."""

    device: str | None = None  # MODULE:NAME, NAME or emu:PROFILE
    supported: Path | None = None  # a list of ops: overrides the probe's
    dtypes: str | None = None  # "float32,float16": overrides the probe's
    detected: Path | None = None  # a probe saved with save_detected
    save_detected: Path | None = None
    probe: bool = False  # probe an emu device instead of reading its profile


@dataclass(frozen=True)
class JudgeSettings:
    """The model judge (Note [Model judge]): its endpoint and requests' size."""

    llm: LLMSettings
    batch: int = 16


@dataclass(frozen=True)
class Inputs:
    """The sources of a selection; all optional but a candidate set (``memory``
    or ``variants``)."""

    memory: Path | None = None  # ootest index build
    ops: Path | None = None  # the op map (ootest ops capture)
    variants: Sequence[Path] = ()  # --ootest-variants dumps
    backend: Backend = field(default_factory=Backend)
    reference: Sequence[Path] = ()  # results on the CPU
    results: Sequence[Path] = ()  # earlier results on the device, oldest first
    replay: Path | None = None  # ootest ops replay of the op map's calls
    scope: Path | None = None  # select scope's output, or file keys
    judge: JudgeSettings | None = None
    root_var: str = "TORCH_ROOT"  # what each file's path: starts with
    #: an upgrade's fresh op evidence (Note [Fresh evidence for the delta])
    capture: DeltaCapture = field(default_factory=lambda: DeltaCapture())

    def sources(self, target: str | None = None) -> Sources:
        return Sources(
            self.memory, self.ops, list(self.reference), list(self.results), self.replay, target
        )


@dataclass
class Selection:
    """Decisions with their evidence, and what writing them needs; nothing written."""

    rows: list[Row]
    fingerprints: dict[str, str]
    header: Callable[[Counter[str]], list[str]]  # the config's header, from the counts
    root_var: str = "TORCH_ROOT"
    device: str | None = None  # the config's device:
    precision: dict[tuple[str, str], Precision] = field(default_factory=dict)
    kept: dict[str, list[Any]] = field(default_factory=dict)  # people's entries, per path
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)  # sidecar additions
    notes: list[str] = field(default_factory=list)  # said while deciding, in order

    @property
    def decisions(self) -> list[Decision]:
        return [d for _, d in self.rows]


@dataclass(frozen=True)
class Written:
    """What :func:`write` wrote."""

    out: Path
    modes: Counter[str]
    reasons: Counter[str]

    @property
    def variants(self) -> int:
        return sum(self.modes.values())

    def lines(self) -> list[str]:
        return [
            f"ootest: decided {self.variants} variants -> {self.out}: "
            + ", ".join(f"{n} {m}" for m, n in sorted(self.modes.items())),
            "  reasons: " + ", ".join(f"{n} {r}" for r, n in self.reasons.most_common()),
        ]


# ------------------------------------------------------------------ sources
def support(backend: Backend) -> Support:
    from ootest.select.backend import capabilities

    caps = capabilities(
        backend.device,
        supported=backend.supported,
        dtypes=backend.dtypes,
        detected=backend.detected,
        save_detected=backend.save_detected,
        probe=backend.probe,
    )
    name = _device_name(backend.device)
    if caps.ops is None:
        return Support(None, caps.dtypes, caps.source, name=name)
    return Support(caps.ops.covers, caps.dtypes, caps.source, caps.ops.dtype_rules(), name)


def _device_name(device: str | None) -> str:
    """The backend's device name (``torch_spyre:spyre`` -> ``spyre``), as upstream's
    gates see it in ``self.device_type``; "" without a device."""
    if device is None:
        return ""
    from ootest.device.activate import DeviceSpec
    from ootest.errors import DeviceError

    try:
        return DeviceSpec.parse(device).name
    except DeviceError:
        return ""


def candidates(memory: Path | None, variants: Sequence[Path]) -> list[Candidate]:
    from ootest.select.gather import from_memory, selectable

    found: dict[str, Any] = {}
    if memory:
        found.update((c.variant_id, c) for c in from_memory(memory))
    for path in variants:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise UserError(f"--variants {path}: cannot read it: {e.strerror or e}") from None
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            vid = str(rec.get("variant_id"))
            if rec.get("kind") == "variant" and selectable(vid, bool(rec.get("device_variant"))):
                c = Candidate(vid, tuple(rec.get("dtypes") or ()))
                c.checks_messages = rec.get("checks_messages") is True
                had = found.setdefault(vid, c)
                had.checks_messages = had.checks_messages or c.checks_messages
    if not found:
        raise UserError(
            "select run: no variants to decide; pass --memory (ootest index build) or "
            "--variants (pytest --collect-only --ootest-variants PATH)"
        )
    return [found[k] for k in sorted(found)]


def _digest(path: Path | None) -> str:
    from ootest.select.writer import file_digest

    return file_digest(path)


def _header(inputs: Inputs, support: Support, counts: Counter[str], model: str) -> list[str]:
    from ootest.select.writer import REPLAY_LINE
    from ootest.version import ootest_version

    summary = ", ".join(f"{n} {m}" for m, n in sorted(counts.items()))
    return [
        "Generated by `ootest select`: every entry says why above it; machine-readable",
        "evidence per variant in the .evidence.jsonl next to this file.",
        f"backend: {support.source}; ootest {ootest_version()}",
        f"memory {_digest(inputs.memory)}; op map {_digest(inputs.ops)}; model: {model}",
        *([f"{REPLAY_LINE}{_digest(inputs.replay)}"] if inputs.replay else []),
        f"decisions: {summary}",
        "",
    ]


def _target(backend: Backend) -> str | None:
    """The device the decisions are for: ``--device``, else the device a
    ``--detected`` probe ran on (None: not known) (Note [Evidence origins])."""
    if backend.device:
        return backend.device
    if backend.detected is not None:
        try:
            data = json.loads(backend.detected.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # reading the detection says what is wrong with it
        device = data.get("device") if isinstance(data, dict) else None
        return str(device) if device else None
    return None


def target_of(backend: Backend, config: Path | None = None) -> str | None:
    """The device the decisions are for (Note [Evidence origins]): ``--device``, else
    the device a ``--detected`` probe ran on, else the ``device:`` of ``config`` (a
    generated config on disk); None: not known."""
    return _target(backend) or (_config_device(config) if config is not None else None)


def _check_replay(replay: Path | None, target: str | None, notes: list[str]) -> Path | None:
    """The replay, when it ran on the target device (Note [Evidence origins]); a
    replay on another device than ``--device`` is an error; one whose device or
    target is not known is not used, and ``notes`` says so."""
    if replay is None:
        return None
    from ootest.opmap.replay import read_replay
    from ootest.record.origin import same_device

    on = read_replay(replay).header.get("device")
    if on is None or not str(on).strip():
        notes.append(
            f"ootest: --replay {replay}: its header names no device it ran on, so it is not "
            "evidence of this one: not used; replay again with `ootest ops replay --device ...`"
        )
        return None
    if target is None:
        notes.append(
            f"ootest: --replay {replay}: replayed on {on}, but no --device names the device "
            f"the decisions are for: not used; pass --device {on} (with --supported to "
            "override its ops) if that is the device"
        )
        return None
    if not same_device(str(on), target):
        raise UserError(
            f"--replay {replay}: replayed on {on}, but --device is {target}; "
            f"replay on it (`ootest ops replay --device {target} ...`) or pass the "
            "device the replay ran on"
        )
    return replay


def _scope(path: Path | None) -> tuple[Any, dict[str, str], str]:
    """The scope (``select.scope.Scope``; None: all in), per excluded file its area,
    and the preferences' notes: from the YAML 'select scope' writes, or a list of
    file keys (one a line)."""
    if path is None:
        return None, {}, ""
    from ootest.select.scope import read_scope

    return read_scope(path)


def _unknown_note(path: Path, unknown: list[str]) -> list[str]:
    """Files the scope neither lists nor excludes are decided as in scope: say so."""
    if not unknown:
        return []
    shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    return [
        f"ootest: scope: {len(unknown)} files are not named in {path} (added after it was "
        f"written?); decided as in scope: {shown}"
    ]


def _scope_areas(evidence: list[Evidence], areas: dict[str, str]) -> None:
    """Out-of-scope evidence names the area the scope left out (out_of_scope:<area>)."""
    for ev in evidence:
        if ev.out_of_scope:
            area = areas.get(ev.variant_id.partition("::")[0])
            if area:
                ev.out_of_scope = area


# ------------------------------------------------------------------ select run
def select(inputs: Inputs) -> Selection:
    """Every candidate decided from the sources (``ootest select run``)."""
    from ootest.select.gather import gather
    from ootest.select.refine import decide_seen

    notes: list[str] = []
    target = _target(inputs.backend)
    inputs = replace(inputs, replay=_check_replay(inputs.replay, target, notes))
    sup = support(inputs.backend)
    scope, areas, prefs_notes = _scope(inputs.scope)
    cands = candidates(inputs.memory, inputs.variants)
    fps = {c.variant_id: c.fingerprint for c in cands}
    sources = inputs.sources(target)
    evidence = gather(cands, sources, sup, scope)
    notes += sources.notes
    _scope_areas(evidence, areas)
    if scope is not None and inputs.scope is not None:
        notes += _unknown_note(
            inputs.scope, scope.unknown(c.variant_id.partition("::")[0] for c in cands)
        )
    rows = [(ev, decide_seen(ev)) for ev in evidence]
    model = "none"
    extra: dict[str, dict[str, Any]] = {}
    if inputs.judge is not None:
        rows, extra, model, line = _judge(inputs.judge, cands, rows, sup, prefs_notes)
        notes.append(line)

    def header(counts: Counter[str]) -> list[str]:
        return _header(inputs, sup, counts, model)

    return Selection(
        rows, fps, header, inputs.root_var, inputs.backend.device, extra=extra, notes=notes
    )


def write(selection: Selection, out: Path) -> Written:
    """The config and its evidence sidecar at ``out``, each replaced atomically."""
    from ootest.select.refine import evidence_row, splice
    from ootest.select.writer import Placed, render, split_id

    s = selection
    placed = []
    for _ev, d in s.rows:
        file, template, axes = split_id(d.variant_id)
        placed.append(Placed(d, file, template, axes))
    counts = Counter(d.mode for _, d in s.rows)
    paths = {p.file: f"${{{s.root_var}}}/{p.file}" for p in placed}
    text = splice(render(placed, paths, s.header(counts), s.precision, s.device), s.kept)

    def lines() -> Iterator[str]:
        for ev, d in sorted(s.rows, key=lambda r: r[1].variant_id):
            row = evidence_row(ev, d, s.fingerprints.get(d.variant_id, ""))
            yield json.dumps({**row, **s.extra.get(d.variant_id, {})}, sort_keys=True) + "\n"

    _write(out, text, lines())
    return Written(out, counts, Counter(d.reason.split(":")[0] for _, d in s.rows))


#: bytes of sidecar lines gathered before one write (the sidecar of 250,000
#: variants is 200 MB: never held whole, as text, list and bytes at once)
_CHUNK = 1 << 20


def _write(out: Path, text: str, sidecar: Iterable[str]) -> None:
    from ootest.atomic import write_all, write_outputs
    from ootest.select.refine import sidecar_path

    def stream(fh: BinaryIO) -> None:
        part: list[bytes] = []
        size = 0
        for line in sidecar:
            b = line.encode("utf-8")
            part.append(b)
            size += len(b)
            if size >= _CHUNK:
                write_all(fh, b"".join(part))
                part, size = [], 0
        if part:
            write_all(fh, b"".join(part))

    write_outputs([(out, text), (sidecar_path(out), stream)], "--out")  # both or neither


# ------------------------------------------------------------------ refine
def refine(
    config: Path, results: Sequence[Path], k: int = 2, max_rtol: float | None = None
) -> Selection:
    """A selected config decided again from real runs (``ootest select refine``);
    :func:`write` it back to ``config``."""
    from ootest.select.refine import (
        declared_in,
        observe,
        people_entries,
        read_sidecar,
        refine_one,
        sidecar_path,
    )
    from ootest.select.writer import split_id

    if k < 1:
        raise UserError(f"-k: expected at least 1 clean pass; found {k}")
    try:
        old = config.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{config}: cannot read it: {e.strerror or e}") from None
    rows = read_sidecar(sidecar_path(config), declared_in(old))
    kept, people = people_entries(old)
    evidence = [ev for ev, _, _ in rows]
    origins: list[str] = []
    last = observe(evidence, list(results), _device(old), origins)
    fps = {ev.variant_id: fp for ev, _, fp in rows}
    out_rows = []
    precision: dict[tuple[str, str], Precision] = {}

    changed = 0
    before = {d.variant_id: (d.mode, d.reason) for _, d, _ in rows}
    for ev, prior, _fp in rows:
        file, template, axes = split_id(ev.variant_id)
        path = next((p for p in kept if p.endswith("/" + file)), None)
        name = f"{template}[{axes}]" if axes else template
        if path is not None and ((path, template) in people or (path, name) in people):
            continue  # a person decided it
        r = refine_one(ev, last.get(ev.variant_id), k, max_rtol, prior)
        if r.precision is not None:
            precision[(file, name)] = r.precision
        changed += before.get(ev.variant_id) != (r.decision.mode, r.decision.reason)
        out_rows.append((ev, r.decision))
    header = old.split("test_suite_config:", 1)[0].splitlines()
    head = [h.removeprefix("# ").removeprefix("#") for h in header if h.startswith("#")]

    def new_head(counts: Counter[str]) -> list[str]:
        summary = ", ".join(f"{n} {m}" for m, n in sorted(counts.items()))
        return [f"decisions: {summary}" if h.startswith("decisions:") else h for h in head]

    notes = [*origins, f"ootest: refine: {changed} of {len(out_rows)} decisions changed"]
    if rows and results and not origins and not any(ev.variant_id in last for ev, _, _ in rows):
        notes.append(
            f"ootest: refine: no result in {', '.join(map(str, results))} is a variant"
            f" of {config} (run on another device, or without one?); nothing learned."
            f" Run the config with `ootest run {config} --device DEVICE`"
        )
    return Selection(
        out_rows, fps, new_head, root_var(old), _device(old), precision, kept, notes=notes
    )


def _config_device(config: Path) -> str | None:
    """The ``device:`` of a generated config on disk (None: none, or unreadable: the
    upgrade itself says what is wrong with the file)."""
    try:
        return _device(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def _device(text: str) -> str | None:
    """The ``device:`` a generated config names (kept when it is rewritten)."""
    m = re.search(r"^  device: *(\S+) *$", text, re.M)
    return m[1] if m else None


# ------------------------------------------------- incremental: --since, enable
def upgrade(
    inputs: Inputs,
    since: Path,
    config: Path,
    out: Path | None = None,
    *,
    say: Callable[[str], None] | None = None,
    replay_before: Path | None = None,
) -> Outcome:
    """Only what changed from the memory ``since`` to ``inputs.memory`` decided
    again in ``config`` (``select run --since``), nothing written:
    :meth:`Outcome.write` writes it to ``out`` (default: ``config``). ``say``
    hears the judge's line when it was asked (before the upgrade is done).
    ``replay_before``: the replay ``inputs.replay`` is a new run of (the
    refresh's ``replay`` step): the variants with a call whose result changed
    between them are decided again too."""
    from ootest.atomic import check_output
    from ootest.select.since import upgrade as since_upgrade

    if inputs.memory is None:
        raise UserError(
            "select run --since: expected --memory NEW.db and --config SUITE.yaml "
            "(the memory to compare with, and the config to update)"
        )
    said: list[str] = []  # what the sources' origins left out (Note [Evidence origins])
    target = target_of(inputs.backend, config)
    inputs = replace(inputs, replay=_check_replay(inputs.replay, target, said))
    sup = support(inputs.backend)
    scope, _areas, prefs_notes = _scope(inputs.scope)
    out = out or config
    check_output(out, "--out")
    # the header names the op map given (the team's), not the delta's copy of it:
    # an upgrade with nothing to decide leaves the config as it is
    given = (inputs.memory, inputs.ops, inputs.replay)
    fresh_notes: list[str] = []
    if inputs.ops is not None and inputs.capture.enabled is not None:
        from ootest.select.since import _Sidecar

        if not since.is_file():
            raise UserError(
                f"--since {since}: no such index; pass the memory the config was decided from"
            )
        _Sidecar(config).close()  # a config without its evidence: said before the capture
        ops = _fresh(inputs, since, out, say)
        if ops is not None:
            fresh_notes.append(ops[1])
            inputs = replace(inputs, ops=ops[0])
    sources = inputs.sources(target)
    # the header's digests are hashed while the diff and the decisions run
    # (hashlib releases the GIL): 0.18 s of reading 160 MB at 250,000 variants
    from concurrent.futures import ThreadPoolExecutor

    hashing = ThreadPoolExecutor(1)
    digests = [hashing.submit(_digest, p) for p in given]
    hashing.shutdown(wait=False)
    model: list[str] = []  # the judge's, once it was asked

    # a config decided without a replay gains the line that names it
    from ootest.select.writer import REPLAY_LINE

    named = inputs.replay is None or _header_has(config, "# " + REPLAY_LINE)

    def provenance(line: str) -> str:
        if line.startswith("# backend: ") and "; ootest " in line:
            # what was probed or declared now (a refresh's new torch and backend build)
            from ootest.version import ootest_version

            return f"# backend: {sup.source}; ootest {ootest_version()}"
        if line.startswith("# " + REPLAY_LINE) and inputs.replay is not None:
            return f"# {REPLAY_LINE}{digests[2].result()}"
        if line.startswith("# memory "):
            line = re.sub(r"^# memory \S+;", f"# memory {digests[0].result()};", line)
            if inputs.ops is not None:
                line = re.sub(r"; op map \S+;", f"; op map {digests[1].result()};", line)
            if model:
                line = re.sub(r"; model: .*$", f"; model: {model[0]}", line)
            if not named:
                line += f"\n# {REPLAY_LINE}{digests[2].result()}"
        return line

    judge = None
    if inputs.judge is not None:
        judge = _asking(inputs.judge, sup, prefs_notes, model, say)
    o = since_upgrade(
        since, config, out, sources, sup, scope, provenance, judge, replay_before=replay_before
    )
    o.notes[:0] = [*fresh_notes, *(n.removeprefix("ootest: ") for n in [*said, *sources.notes])]
    return o


def _fresh(
    inputs: Inputs, since: Path, out: Path, say: Callable[[str], None] | None
) -> tuple[Path, str] | None:
    """The op map an upgrade decides from (Note [Fresh evidence for the delta]) and
    the line that says what it holds; None: the team's, as it is (nothing moved,
    added or modified)."""
    from ootest.atomic import check_output
    from ootest.select.fresh import delta, fresh_ops

    assert inputs.memory is not None and inputs.ops is not None
    how = inputs.capture
    d = delta(since, inputs.memory)
    if d.empty():
        return None
    stem = out.name.removesuffix(".yaml").removesuffix(".yml")
    target = how.out or out.with_name(f"{stem}.ops.db")
    check_output(target, "--ops-out")
    f = fresh_ops(
        inputs.ops, target, d, capture=bool(how.enabled), device=how.device, timeout=how.timeout,
        capturer=how.capturer, say=say or (lambda _: None),
    )  # fmt: skip
    return target, (
        f"{f.summary()}; decided from {target} (a copy: the team's op map {inputs.ops} "
        "is unchanged)"
    )


def _asking(
    settings: JudgeSettings,
    sup: Support,
    prefs_notes: str,
    model: list[str],
    say: Callable[[str], None] | None,
) -> Judging:
    """The judge as an upgrade asks it; its model text goes to ``model``."""

    def judge(
        cands: list[Candidate], rows: list[Row], known: Collection[str]
    ) -> tuple[list[Row], dict[str, dict[str, Any]]]:
        rows, extra, name, line = _judge(settings, cands, rows, sup, prefs_notes, known)
        model.append(name)
        if say is not None:
            say(line)
        return rows, extra

    return judge


def _header_has(config: Path, prefix: str) -> bool:
    """Whether a line of the config's header (the comments above
    ``test_suite_config:``) starts with ``prefix``."""
    try:
        with open(config, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("test_suite_config:"):
                    return False
                if line.startswith(prefix):
                    return True
    except OSError:
        return False  # the upgrade itself says what is wrong with the file
    return False


def enable(op: str, ops: Path, config: Path, out: Path | None = None) -> Outcome:
    """The variants that waited on ``op`` decided again (``select enable``)."""
    from ootest.atomic import check_output
    from ootest.select.since import enable_op

    check_output(out or config, "--out")
    o, _name = enable_op(op, ops, config, out or config)
    return o


# ------------------------------------------------------------------ model judge


def judge_settings(
    endpoint: str | None = None,
    model: str | None = None,
    key_file: Path | None = None,
    *,
    timeout: float = 60.0,
    batch: int = 16,
) -> JudgeSettings:
    """The judge's settings (Note [Model judge]): the arguments, else the
    environment (``OOTEST_JUDGE_*``, ``OOTEST_LLM_*``, ``OPENAI_*``)."""
    if not timeout > 0:
        raise UserError(f"--judge-timeout: expected a positive number of seconds; found {timeout}")
    if not 1 <= batch <= 64:
        raise UserError(f"--judge-batch: expected 1 to 64 variants; found {batch}")
    key = None
    if key_file is not None:
        from ootest.atomic import read_key

        # a regular file, bounded: /dev/zero, a FIFO or 50 MB hung the command
        key = read_key(key_file, "--judge-key-file")
    llm = LLMSettings.resolve(
        endpoint,
        model,
        key,
        what="the model judge needs",
        flags=("--judge-endpoint", "--judge-model"),
        prefixes=("OOTEST_JUDGE", "OOTEST_LLM"),
        timeout=timeout,
    )
    return JudgeSettings(llm, batch)


def _judge(
    settings: JudgeSettings,
    cands: list[Candidate],
    rows: list[Row],
    support: Support,
    notes: str,
    known: Collection[str] | None = None,
) -> tuple[list[Row], dict[str, dict[str, Any]], str, str]:
    """The rows with the judge's accepted decisions, each judged variant's record
    for the sidecar, the header's model text and the line that says what it did.
    ``known``: the variant IDs a citation may name (default: the candidates)."""
    from ootest.cache import cache_dir
    from ootest.select.judge import AnswerCache, Case, Limits, context_text, judge, prompt_hash

    lim = Limits(batch=settings.batch)
    decos = {c.variant_id: c.decorators for c in cands}
    cases = [
        Case.of(ev, d, decos.get(ev.variant_id, ()), support.name)
        for ev, d in rows
        if d.reason == "no_evidence"
    ]
    verdicts, rep = judge(
        cases,
        set(decos) if known is None else known,
        settings.llm,
        AnswerCache(cache_dir() / "judge"),
        context=context_text(support.dtypes, notes, lim),
        limits=lim,
    )
    out = []
    for ev, d in rows:
        v = verdicts.get(ev.variant_id)
        out.append((ev, v.decision if v is not None and v.decision is not None else d))
    extra = {vid: {"judge": v.record} for vid, v in verdicts.items()}
    line = f"ootest: {rep.line(settings.llm.model)}"
    return out, extra, f"{settings.llm.model} (judge prompt {prompt_hash()})", line
