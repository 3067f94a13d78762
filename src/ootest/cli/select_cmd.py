"""``ootest select run|refine``: a reviewed config in which every decision says why.

See docs/select.md. Nothing here imports torch: the evidence comes from the
repository memory, the op map and results files.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from ootest.cli.review_cmd import add_parser as add_review
from ootest.errors import UserError
from ootest.timeout import check_timeout


def add_parser(sub: Any) -> None:
    p = sub.add_parser("select", help="decide every variant from evidence; refine from real runs")
    ssub = p.add_subparsers(dest="select_command", required=True, metavar="ACTION")

    r = ssub.add_parser("run", help="decide every variant in scope and write the config")
    r.add_argument("--memory", type=Path, metavar="DB", help="repository memory (index build)")
    r.add_argument("--ops", type=Path, metavar="DB", help="op map (ops capture)")
    r.add_argument(
        "--variants",
        type=Path,
        metavar="JSONL",
        action="append",
        default=[],
        help="collected variants (--ootest-variants), with or instead of --memory",
    )
    _add_capabilities(r)
    r.add_argument(
        "--reference",
        type=Path,
        action="append",
        default=[],
        metavar="JSONL",
        help="results of the same tests on the CPU",
    )
    r.add_argument(
        "--results",
        type=Path,
        action="append",
        default=[],
        metavar="JSONL",
        help="earlier results on the device (oldest first)",
    )
    r.add_argument(
        "--replay",
        type=Path,
        metavar="JSONL",
        help="the op map's calls replayed on the device (ootest ops replay; needs --ops)",
    )
    r.add_argument(
        "--scope", type=Path, metavar="FILE", help="select scope output, or file keys (!KEY: out)"
    )
    r.add_argument(
        "--root-var",
        default="TORCH_ROOT",
        help="variable the path: of each file starts with (default TORCH_ROOT)",
    )
    r.add_argument("--out", type=Path, metavar="SUITE.yaml", help="the config to write")
    _add_since(r)
    _add_judge(r)
    r.set_defaults(func=run)

    f = ssub.add_parser("refine", help="re-decide a selected config from real runs")
    f.add_argument("config", type=Path, metavar="SUITE.yaml")
    f.add_argument("--results", type=Path, action="append", required=True, metavar="JSONL")
    f.add_argument("-k", type=int, default=2, help="clean passes before mandatory (default 2)")
    f.add_argument(
        "--max-rtol",
        type=float,
        default=None,
        help="largest relative mismatch a precision proposal covers (default: per dtype, "
        "float32 1e-4, float16 1e-2, bfloat16 5e-2)",
    )
    f.set_defaults(func=refine)
    _add_enable_and_scope(ssub)

    _add_audit(ssub)
    add_review(ssub)  # ootest select review (cli/review_cmd.py)


def _add_capabilities(p: argparse.ArgumentParser) -> None:
    """The backend's ops and dtypes (Note [Backend capabilities])."""
    p.add_argument(
        "--device",
        metavar="DEVICE",
        help="the backend: MODULE:NAME or NAME (probed in a child process) or emu:PROFILE",
    )
    p.add_argument("--probe", action="store_true", help="probe an emu device too (not its profile)")
    p.add_argument(
        "--detected", type=Path, metavar="JSON", help="a probe saved with --save-detected"
    )
    p.add_argument("--save-detected", type=Path, metavar="JSON", help="save the probe's result")
    p.add_argument(
        "--supported", type=Path, metavar="FILE", help="supported ops (a list): overrides the probe"
    )
    p.add_argument("--dtypes", metavar="D,D", help="supported dtypes: overrides the probe")


def _capabilities(args: argparse.Namespace) -> Any:
    from ootest.select.backend import capabilities

    return capabilities(
        args.device,
        supported=args.supported,
        dtypes=args.dtypes,
        detected=getattr(args, "detected", None),
        save_detected=getattr(args, "save_detected", None),
        probe=getattr(args, "probe", False),
    )


def _support(args: argparse.Namespace) -> Any:
    from ootest.select.gather import Support

    caps = _capabilities(args)
    if caps.ops is None:
        return Support(None, caps.dtypes, caps.source)
    return Support(caps.ops.covers, caps.dtypes, caps.source, caps.ops.dtype_rules())


def _candidates(args: argparse.Namespace) -> list[Any]:
    import json

    from ootest.select.gather import Candidate, from_memory, selectable

    found: dict[str, Any] = {}
    if args.memory:
        found.update((c.variant_id, c) for c in from_memory(args.memory))
    for path in args.variants:
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


def _header(
    args: argparse.Namespace, support: Any, counts: Counter[str], model: str = "none"
) -> list[str]:
    from ootest.select.writer import REPLAY_LINE
    from ootest.version import ootest_version

    summary = ", ".join(f"{n} {m}" for m, n in sorted(counts.items()))
    return [
        "Generated by `ootest select`: every entry says why above it; machine-readable",
        "evidence per variant in the .evidence.jsonl next to this file.",
        f"backend: {support.source}; ootest {ootest_version()}",
        f"memory {_digest(args.memory)}; op map {_digest(args.ops)}; model: {model}",
        *([f"{REPLAY_LINE}{_digest(args.replay)}"] if args.replay else []),
        f"decisions: {summary}",
        "",
    ]


def _write(out: Path, text: str, sidecar: str) -> None:
    from ootest.select.refine import sidecar_path

    out.parent.mkdir(parents=True, exist_ok=True)
    for path, data in ((out, text), (sidecar_path(out), sidecar)):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)


def run(args: argparse.Namespace) -> int:
    from ootest.select.gather import Sources, gather
    from ootest.select.refine import decide_seen

    if args.since is not None:
        return run_since(args)
    if args.out is None:
        raise UserError(
            "select run: expected --out SUITE.yaml (or --since OLD.db --config SUITE.yaml)"
        )
    from ootest.atomic import check_output

    check_output(args.out, "--out")
    judging = _judging(args)  # its settings are checked before any work
    _check_replay(args)
    support = _support(args)
    scope, areas, notes = _scope(args.scope)
    cands = _candidates(args)
    fps = {c.variant_id: c.fingerprint for c in cands}
    sources = Sources(args.memory, args.ops, args.reference, args.results, args.replay)
    evidence = gather(cands, sources, support, scope)
    _scope_areas(evidence, areas)
    if scope is not None:
        _say_unknown(args.scope, scope.unknown(c.variant_id.partition("::")[0] for c in cands))
    rows = [(ev, decide_seen(ev)) for ev in evidence]
    model = "none"
    extra: dict[str, dict[str, Any]] = {}
    if judging is not None:
        rows, extra, model = _judge(judging, args, cands, rows, support, notes)

    def header(counts: Counter[str]) -> list[str]:
        return _header(args, support, counts, model)

    return _emit(args.out, rows, fps, args.root_var, header, {}, {}, extra, args.device)


def _emit(
    out: Path,
    rows: list[tuple[Any, Any]],
    fps: dict[str, str],
    root_var: str,
    header: Any,
    precision: dict[tuple[str, str], Any],
    kept: dict[str, list[Any]],
    extra: dict[str, dict[str, Any]] | None = None,
    device: str | None = None,
) -> int:
    import json

    from ootest.select.refine import evidence_row, splice
    from ootest.select.writer import Placed, render, split_id

    placed = []
    for _ev, d in rows:
        file, template, axes = split_id(d.variant_id)
        placed.append(Placed(d, file, template, axes))
    counts = Counter(d.mode for _, d in rows)
    paths = {p.file: f"${{{root_var}}}/{p.file}" for p in placed}
    text = splice(render(placed, paths, header(counts), precision, device), kept)
    extra = extra or {}
    side = "".join(
        json.dumps(
            {**evidence_row(ev, d, fps.get(d.variant_id, "")), **extra.get(d.variant_id, {})},
            sort_keys=True,
        )
        + "\n"
        for ev, d in sorted(rows, key=lambda r: r[1].variant_id)
    )
    _write(out, text, side)
    reasons = Counter(d.reason.split(":")[0] for _, d in rows)
    print(
        f"ootest: decided {len(rows)} variants -> {out}: "
        + ", ".join(f"{n} {m}" for m, n in sorted(counts.items()))
    )
    print("  reasons: " + ", ".join(f"{n} {r}" for r, n in reasons.most_common()))
    return 0


def refine(args: argparse.Namespace) -> int:
    from ootest.select.refine import observe, people_entries, read_sidecar, refine_one, sidecar_path

    if args.k < 1:
        raise UserError(f"-k: expected at least 1 clean pass; found {args.k}")
    rows = read_sidecar(sidecar_path(args.config))
    try:
        old = args.config.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{args.config}: cannot read it: {e.strerror or e}") from None
    kept, people = people_entries(old)
    evidence = [ev for ev, _, _ in rows]
    last = observe(evidence, args.results)
    fps = {ev.variant_id: fp for ev, _, fp in rows}
    out_rows = []
    precision: dict[tuple[str, str], Any] = {}
    from ootest.select.writer import split_id

    changed = 0
    before = {d.variant_id: (d.mode, d.reason) for _, d, _ in rows}
    for ev, prior, _fp in rows:
        file, template, axes = split_id(ev.variant_id)
        path = next((p for p in kept if p.endswith("/" + file)), None)
        name = f"{template}[{axes}]" if axes else template
        if path is not None and ((path, template) in people or (path, name) in people):
            continue  # a person decided it
        r = refine_one(ev, last.get(ev.variant_id), args.k, args.max_rtol, prior)
        if r.precision is not None:
            precision[(file, name)] = r.precision
        changed += before.get(ev.variant_id) != (r.decision.mode, r.decision.reason)
        out_rows.append((ev, r.decision))
    header = old.split("test_suite_config:", 1)[0].splitlines()
    head = [h.removeprefix("# ").removeprefix("#") for h in header if h.startswith("#")]

    def new_head(counts: Counter[str]) -> list[str]:
        summary = ", ".join(f"{n} {m}" for m, n in sorted(counts.items()))
        return [f"decisions: {summary}" if h.startswith("decisions:") else h for h in head]

    print(f"ootest: refine: {changed} of {len(out_rows)} decisions changed", file=sys.stderr)
    if rows and args.results and not any(ev.variant_id in last for ev, _, _ in rows):
        print(
            f"ootest: refine: no result in {', '.join(map(str, args.results))} is a variant"
            f" of {args.config} (run on another device, or without one?); nothing learned."
            f" Run the config with `ootest run {args.config} --device DEVICE`",
            file=sys.stderr,
        )
    return _emit(
        args.config, out_rows, fps, _root_var(old), new_head, precision, kept, None, _device(old)
    )


def _device(text: str) -> str | None:
    """The ``device:`` a generated config names (kept when it is rewritten)."""
    import re

    m = re.search(r"^  device: *(\S+) *$", text, re.M)
    return m[1] if m else None


def _root_var(text: str) -> str:
    import re

    m = re.search(r"path: \$\{(\w+)\}/", text)
    return m[1] if m else "TORCH_ROOT"


# ------------------------------------------------------------------ audit
def _add_audit(ssub: Any) -> None:
    a = ssub.add_parser(
        "audit",
        help="run a random sample of skipped/xfailed variants: the false-skip rate",
        description="Run a seeded random sample of the variants the config skips or "
        "xfails and report the share that pass (the false-skip rate) with a 95% "
        "Wilson interval, overall, per reason code and per mode. Extra arguments "
        "after -- go to pytest.",
    )
    a.add_argument("config", type=Path, metavar="SUITE.yaml")
    a.add_argument("--sample", type=int, required=True, metavar="N", help="variants to run")
    a.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    a.add_argument("--device", help="override the config's device ('emu[:profile]' or 'mod:name')")
    a.add_argument(
        "--reason",
        metavar="CODE",
        help="only variants with this reason code (op_unsupported, or a full code)",
    )
    a.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="per-test timeout (default: the config's 'timeout:', else 300)",
    )
    a.add_argument(
        "--results",
        type=Path,
        metavar="JSONL",
        help="results of the audit run (default: SUITE.audit/results.jsonl next to the config)",
    )
    a.add_argument(
        "--memory",
        type=Path,
        metavar="DB",
        help="the variants that exist (index build): those without a decision are sampled too",
    )
    a.add_argument(
        "--variants",
        type=Path,
        action="append",
        default=[],
        metavar="JSONL",
        help="collected variants (--ootest-variants): those without a decision are sampled too",
    )
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.set_defaults(func=audit)


def audit(args: argparse.Namespace) -> int:
    import json

    from ootest.record.results import RunData
    from ootest.select import audit as au

    if args.sample < 1:
        raise UserError(f"--sample: expected at least 1 variant; found {args.sample}")
    check_timeout(args.timeout, "--timeout")
    known: list[str] = []
    if args.memory or args.variants:
        known = [c.variant_id for c in _candidates(args)]
    pop, cfg, by_key = au.population(args.config, known)
    members = pop.members
    if args.reason:
        members = [m for m in members if au.matches_reason(m.reason, args.reason)]
        if not members and pop.members:  # a mistyped code was an empty audit, exit 0
            codes = sorted({m.reason.split(":")[0] for m in pop.members})
            raise UserError(
                f"--reason {args.reason}: no skipped or xfailed variant of {args.config} has "
                f"that reason code; expected one of: {', '.join(codes)}"
            )
    chosen = au.draw(members, args.sample, args.seed)
    records: dict[str, dict[str, Any]] = {}
    if chosen:
        path = au.audit_path(args.config)
        header = [
            f"Generated by `ootest select audit {args.config.name}`: runs exactly the "
            f"{len(chosen)} sampled variants",
            f"(seed {args.seed}, of {len(members)} skipped or xfailed) as mandatory_success.",
        ]
        path.write_text(au.audit_config(cfg, by_key, chosen, header), encoding="utf-8")
        results = args.results or au.results_path(args.config)
        timeout = args.timeout or cfg.suite.timeout or 300.0
        print(
            f"ootest: audit: running {len(chosen)} of {len(members)} skipped or xfailed "
            f"variants (seed {args.seed}) with {path}",
            file=sys.stderr,
            flush=True,
        )
        au.run_sample(
            path, results, device=args.device, timeout=timeout, pytest_args=args.pytest_args
        )
        records = RunData.load(results).results
    else:
        print("ootest: audit: the config skips or xfails none of its variants", file=sys.stderr)
    rep = au.tally(pop, members, chosen, records, args.seed, args.sample)
    if args.json:
        print(json.dumps(rep.to_json(), indent=2))
    else:
        au.print_report(rep)
    return 0


# ------------------------------------------------- incremental: --since, enable, scope
# (select/since.py, select/patch.py, select/scope.py; docs/select.md "Upgrades",
# "Enabling an op", "Scope")


def _add_since(r: Any) -> None:
    r.add_argument(
        "--since",
        type=Path,
        metavar="OLD.db",
        help="re-decide only what changed since this memory (with --memory NEW.db --config)",
    )
    r.add_argument(
        "--config",
        type=Path,
        metavar="SUITE.yaml",
        help="with --since: the selected config to update (written back unless --out)",
    )


def _add_enable_and_scope(ssub: Any) -> None:
    e = ssub.add_parser("enable", help="re-decide the variants that waited on an op")
    e.add_argument("op", metavar="OP", help="the op the backend now supports (cumsum, aten::mm)")
    e.add_argument("--ops", type=Path, required=True, metavar="DB", help="op map (ops capture)")
    e.add_argument("--config", type=Path, required=True, metavar="SUITE.yaml")
    e.add_argument("--out", type=Path, metavar="SUITE.yaml", help="write here (default: --config)")
    e.set_defaults(func=enable)

    s = ssub.add_parser("scope", help="which test files are worth analysing, and why")
    s.add_argument("--device", metavar="DEVICE", help="emu[:PROFILE] or MODULE:NAME")
    s.add_argument("--prefs", type=Path, metavar="SCOPE.yaml", help="the team's preferences")
    s.add_argument(
        "--root",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="folder of test files (default: $TORCH_ROOT/test)",
    )
    s.add_argument("--out", type=Path, metavar="SCOPE.yaml", help="write here (default: stdout)")
    s.add_argument(
        "--detected",
        type=Path,
        metavar="JSON",
        help="use this detection result instead of probing the device (from --save-detected)",
    )
    s.add_argument(
        "--save-detected", type=Path, metavar="JSON", help="also write the detection result"
    )
    s.set_defaults(func=scope)


def _scope(path: Path | None) -> tuple[Any, dict[str, str], str]:
    """The scope (``select.scope.Scope``; None: all in), per excluded file its area,
    and the preferences' notes: from the YAML 'select scope' writes, or a list of
    file keys (one a line)."""
    if path is None:
        return None, {}, ""
    from ootest.select.scope import read_scope

    return read_scope(path)


def _say_unknown(path: Path, unknown: list[str]) -> None:
    """Files the scope neither lists nor excludes are decided as in scope: say so."""
    if not unknown:
        return
    shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    print(
        f"ootest: scope: {len(unknown)} files are not named in {path} (added after it was "
        f"written?); decided as in scope: {shown}",
        file=sys.stderr,
    )


def _scope_areas(evidence: list[Any], areas: dict[str, str]) -> None:
    """Out-of-scope evidence names the area the scope left out (out_of_scope:<area>)."""
    for ev in evidence:
        if ev.out_of_scope:
            area = areas.get(ev.variant_id.partition("::")[0])
            if area:
                ev.out_of_scope = area


def run_since(args: argparse.Namespace) -> int:
    from ootest.select.gather import Sources
    from ootest.select.since import upgrade

    if args.memory is None or args.config is None:
        raise UserError(
            "select run --since: expected --memory NEW.db and --config SUITE.yaml "
            "(the memory to compare with, and the config to update)"
        )
    judging = _judging(args)
    _check_replay(args)
    support = _support(args)
    scope, _areas, notes = _scope(args.scope)
    sources = Sources(args.memory, args.ops, args.reference, args.results, args.replay)
    # the header's digests are hashed while the diff and the decisions run
    # (hashlib releases the GIL): 0.18 s of reading 160 MB at 250,000 variants
    from concurrent.futures import ThreadPoolExecutor

    hashing = ThreadPoolExecutor(1)
    digests = [hashing.submit(_digest, p) for p in (args.memory, args.ops, args.replay)]
    hashing.shutdown(wait=False)
    model: list[str] = []  # the judge's, once it was asked

    # a config decided without a replay gains the line that names it
    from ootest.select.writer import REPLAY_LINE

    named = args.replay is None or _header_has(args.config, "# " + REPLAY_LINE)

    def provenance(line: str) -> str:
        import re

        if line.startswith("# " + REPLAY_LINE) and args.replay is not None:
            return f"# {REPLAY_LINE}{digests[2].result()}"
        if line.startswith("# memory "):
            line = re.sub(r"^# memory \S+;", f"# memory {digests[0].result()};", line)
            if args.ops is not None:
                line = re.sub(r"; op map \S+;", f"; op map {digests[1].result()};", line)
            if model:
                line = re.sub(r"; model: .*$", f"; model: {model[0]}", line)
            if not named:
                line += f"\n# {REPLAY_LINE}{digests[2].result()}"
        return line

    judge = None
    if judging is not None:

        def judge(
            cands: list[Any], rows: list[tuple[Any, Any]], known: Any
        ) -> tuple[list[tuple[Any, Any]], dict[str, dict[str, Any]]]:
            rows, extra, name = _judge(judging, args, cands, rows, support, notes, known)
            model.append(name)
            return rows, extra

    out = args.out or args.config
    from ootest.atomic import check_output

    check_output(out, "--out")
    o = upgrade(args.since, args.config, out, sources, support, scope, provenance, judge)
    return _report(o)


def _check_replay(args: argparse.Namespace) -> None:
    """A replay made on another device than ``--device`` says so before any work."""
    if args.replay is None or not args.device:
        return
    from ootest.opmap.replay import read_replay

    on = read_replay(args.replay).header.get("device")
    if on is not None and str(on) != args.device:
        raise UserError(
            f"--replay {args.replay}: replayed on {on}, but --device is {args.device}; "
            f"replay on it (`ootest ops replay --device {args.device} ...`) or pass the "
            "device the replay ran on"
        )


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


def _report(o: Any) -> int:
    o.write()
    sys.stdout.write(o.diff)
    print(f"ootest: {o.summary()} -> {o.out}", file=sys.stderr)
    for note in o.notes:
        print(f"  {note}", file=sys.stderr)
    return 0


def enable(args: argparse.Namespace) -> int:
    from ootest.atomic import check_output
    from ootest.select.since import enable_op

    check_output(args.out or args.config, "--out")
    o, _name = enable_op(args.op, args.ops, args.config, args.out or args.config)
    return _report(o)


def scope(args: argparse.Namespace) -> int:
    from ootest.select.scope import run_scope

    return run_scope(args)


# ------------------------------------------------------------------ model judge
# (select/judge.py, Note [Model judge]; docs/select.md "Model judge")


def _add_judge(r: Any) -> None:
    g = r.add_argument_group(
        "model judge (optional, off by default)",
        "A model behind an OpenAI-compatible chat API proposes buckets for the variants "
        "the rules leave open (no_evidence), citing facts of the memory. Endpoint, model "
        "and key: the options, else OOTEST_JUDGE_ENDPOINT/_MODEL/_API_KEY, else "
        "OOTEST_LLM_ENDPOINT/_MODEL/_API_KEY (OPENAI_BASE_URL, OPENAI_API_KEY).",
    )
    g.add_argument("--judge", action="store_true", help="ask the model judge")
    g.add_argument(
        "--judge-endpoint", metavar="URL", help="base URL, e.g. http://localhost:8000/v1"
    )
    g.add_argument("--judge-model", metavar="NAME", help="model name the endpoint serves")
    g.add_argument(
        "--judge-key-file", type=Path, metavar="FILE", help="read the API key from this file"
    )
    g.add_argument(
        "--judge-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="per request, reading included (default 60)",
    )
    g.add_argument(
        "--judge-batch", type=int, default=16, metavar="N", help="variants per request (default 16)"
    )


def _judging(args: argparse.Namespace) -> Any:
    """The judge's settings when it is asked for (--judge, --judge-endpoint or
    --judge-model), else None. Environment variables alone never turn it on."""
    if not (args.judge or args.judge_endpoint or args.judge_model):
        return None
    from ootest.llm import LLMSettings

    if not args.judge_timeout > 0:
        raise UserError(
            f"--judge-timeout: expected a positive number of seconds; found {args.judge_timeout}"
        )
    if not 1 <= args.judge_batch <= 64:
        raise UserError(f"--judge-batch: expected 1 to 64 variants; found {args.judge_batch}")
    key = None
    if args.judge_key_file is not None:
        try:
            key = args.judge_key_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise UserError(
                f"--judge-key-file {args.judge_key_file}: expected a file holding the API key; "
                f"cannot read it: {why or e}"
            ) from None
        if not key:
            raise UserError(
                f"--judge-key-file {args.judge_key_file}: expected the API key; the file is empty"
            )
    return LLMSettings.resolve(
        args.judge_endpoint,
        args.judge_model,
        key,
        what="the model judge needs",
        flags=("--judge-endpoint", "--judge-model"),
        prefixes=("OOTEST_JUDGE", "OOTEST_LLM"),
        timeout=args.judge_timeout,
    )


def _judge(
    settings: Any,
    args: argparse.Namespace,
    cands: list[Any],
    rows: list[tuple[Any, Any]],
    support: Any,
    notes: str,
    known: Any = None,
) -> tuple[list[tuple[Any, Any]], dict[str, dict[str, Any]], str]:
    """The rows with the judge's accepted decisions, each judged variant's record
    for the sidecar, and the header's model text. ``known``: the variant IDs a
    citation may name (default: the candidates)."""
    from ootest.cache import cache_dir
    from ootest.select.judge import AnswerCache, Case, Limits, context_text, judge, prompt_hash

    lim = Limits(batch=args.judge_batch)
    decos = {c.variant_id: c.decorators for c in cands}
    cases = [
        Case.of(ev, d, decos.get(ev.variant_id, ())) for ev, d in rows if d.reason == "no_evidence"
    ]
    verdicts, rep = judge(
        cases,
        set(decos) if known is None else known,
        settings,
        AnswerCache(cache_dir() / "judge"),
        context=context_text(support.dtypes, notes, lim),
        limits=lim,
    )
    out = []
    for ev, d in rows:
        v = verdicts.get(ev.variant_id)
        out.append((ev, v.decision if v is not None and v.decision is not None else d))
    print(f"ootest: {rep.line(settings.model)}", file=sys.stderr)
    extra = {vid: {"judge": v.record} for vid, v in verdicts.items()}
    return out, extra, f"{settings.model} (judge prompt {prompt_hash()})"
