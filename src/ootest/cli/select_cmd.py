"""``ootest select run|refine``: a reviewed config in which every decision says why.

See docs/select.md. Nothing here imports torch: the evidence comes from the
repository memory, the op map and results files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ootest.atomic import write_output
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
    _add_refresh(ssub)


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


def _backend(args: argparse.Namespace) -> Any:
    from ootest.select.pipeline import Backend

    return Backend(
        args.device,
        supported=args.supported,
        dtypes=args.dtypes,
        detected=getattr(args, "detected", None),
        save_detected=getattr(args, "save_detected", None),
        probe=getattr(args, "probe", False),
    )


def _inputs(args: argparse.Namespace, judge: Any) -> Any:
    from ootest.select.pipeline import Inputs

    return Inputs(
        memory=args.memory,
        ops=args.ops,
        variants=args.variants,
        backend=_backend(args),
        reference=args.reference,
        results=args.results,
        replay=args.replay,
        scope=args.scope,
        judge=judge,
        root_var=args.root_var,
        capture=_capture(args),
    )


def _capture(args: argparse.Namespace) -> Any:
    from ootest.select.fresh import DeltaCapture

    if not hasattr(args, "capture"):
        return DeltaCapture()
    check_timeout(args.capture_timeout, "--capture-timeout")
    return DeltaCapture(
        enabled=args.capture,
        device=args.capture_device,
        timeout=args.capture_timeout,
        out=getattr(args, "ops_out", None),
    )


def _say(notes: list[str]) -> None:
    for line in notes:
        print(line, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from ootest.select import pipeline

    if args.since is not None:
        return run_since(args)
    if args.out is None:
        raise UserError(
            "select run: expected --out SUITE.yaml (or --since OLD.db --config SUITE.yaml)"
        )
    from ootest.atomic import check_output

    check_output(args.out, "--out")
    judging = _judging(args)  # its settings are checked before any work
    sel = pipeline.select(_inputs(args, judging))
    _say(sel.notes)
    return _emit(pipeline.write(sel, args.out))


def _emit(written: Any) -> int:
    for line in written.lines():
        print(line)
    return 0


def refine(args: argparse.Namespace) -> int:
    from ootest.select import pipeline

    sel = pipeline.refine(args.config, args.results, args.k, args.max_rtol)
    _say(sel.notes)
    return _emit(pipeline.write(sel, args.config))


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

    from ootest.select import audit as au

    check_timeout(args.timeout, "--timeout")
    known: list[str] = []
    if args.memory or args.variants:
        from ootest.select.pipeline import candidates

        known = [c.variant_id for c in candidates(args.memory, args.variants)]
    rep = au.audit(
        args.config,
        sample=args.sample,
        seed=args.seed,
        reason=args.reason,
        known=known,
        device=args.device,
        timeout=args.timeout,
        results=args.results,
        pytest_args=args.pytest_args,
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
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
    _add_capture(r, "with --since and --ops: ")
    r.add_argument(
        "--ops-out",
        type=Path,
        metavar="DB",
        help="with --since: where the copy of --ops with the delta's fresh evidence goes "
        "(default: SUITE.ops.db next to the config written)",
    )


def _add_capture(p: Any, when: str) -> None:
    """The delta capture (Note [Fresh evidence for the delta])."""
    p.add_argument(
        "--no-capture",
        dest="capture",
        action="store_false",
        help=f"{when}do not capture the added and modified variants on the reference device "
        "(none can be built here): their op evidence is stale and they run",
    )
    from ootest.select.fresh import REFERENCE

    p.add_argument(
        "--capture-device",
        default=REFERENCE,
        metavar="DEVICE",
        help="the reference device of the delta capture (default: emu:full, as ops capture)",
    )
    p.add_argument(
        "--capture-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="per-test timeout of the delta capture (default 300)",
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


def run_since(args: argparse.Namespace) -> int:
    from ootest.select import pipeline

    if args.memory is None or args.config is None:
        raise UserError(
            "select run --since: expected --memory NEW.db and --config SUITE.yaml "
            "(the memory to compare with, and the config to update)"
        )
    judging = _judging(args)
    o = pipeline.upgrade(
        _inputs(args, judging), args.since, args.config, args.out, say=lambda m: _say([m])
    )
    return _report(o)


def _report(o: Any) -> int:
    o.write()
    sys.stdout.write(o.diff)
    print(f"ootest: {o.summary()} -> {o.out}", file=sys.stderr)
    for note in o.notes:
        print(f"  {note}", file=sys.stderr)
    return 0


def enable(args: argparse.Namespace) -> int:
    from ootest.select import pipeline

    return _report(pipeline.enable(args.op, args.ops, args.config, args.out))


def scope(args: argparse.Namespace) -> int:
    from ootest.atomic import check_output
    from ootest.select.scope import run_scope
    from ootest.untrusted import for_terminal

    if args.out is not None:
        check_output(args.out, "--out")  # before the backend is probed
    found = run_scope(
        args.root,
        device=args.device,
        detected=args.detected,
        save_detected=args.save_detected,
        prefs=args.prefs,
        warn=lambda line: print(f"warning: {for_terminal(line)}", file=sys.stderr),
    )
    text = found.text()
    if args.out is not None:
        write_output(args.out, text, "--out")
    else:
        sys.stdout.write(text)
    print(
        f"ootest: scope: {found.inside} of {len(found.scoped)} test files in scope for "
        f"{found.detection.device}" + (f" -> {args.out}" if args.out else ""),
        file=sys.stderr,
    )
    return 0


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
    from ootest.select.pipeline import judge_settings

    return judge_settings(
        args.judge_endpoint,
        args.judge_model,
        args.judge_key_file,
        timeout=args.judge_timeout,
        batch=args.judge_batch,
    )


# ------------------------------------------------------------------ refresh
# (select/refresh.py, Note [Refresh]; docs/select.md "Refresh")


def _add_refresh(ssub: Any) -> None:
    f = ssub.add_parser(
        "refresh",
        help="a whole upgrade in one command: index, diff, capture, replay, re-decide, run, "
        "refine, write",
        description="Build the memory of the installed torch and test tree, capture the "
        "variants that changed since --memory on the reference device (with --ops), replay "
        "the op map's calls on the device again (with --replay), re-decide what changed "
        "(select run --since), run those variants on the device, "
        "refine from that run, and write the config, its evidence, the review page and a "
        "pull-request body. Resumable: a killed refresh goes on at the step it was in "
        "when run again. Extra arguments after -- go to pytest.",
    )
    f.add_argument("--config", type=Path, required=True, metavar="SUITE.yaml")
    f.add_argument(
        "--memory",
        type=Path,
        required=True,
        metavar="OLD.db",
        help="the memory the config was decided from; replaced by the new one at the end",
    )
    from ootest.cli.index_cmd import add_roots

    add_roots(f, "the test tree of the installed torch (as index build --root)")
    f.add_argument(
        "--work",
        type=Path,
        metavar="DIR",
        help="state, new memory, run, review page and PR body (default: SUITE.refresh/)",
    )
    f.add_argument("--ops", type=Path, metavar="DB", help="op map (ops capture)")
    _add_capture(f, "with --ops: ")
    _add_capabilities(f)
    f.add_argument("--reference", type=Path, action="append", default=[], metavar="JSONL")
    f.add_argument("--results", type=Path, action="append", default=[], metavar="JSONL")
    f.add_argument(
        "--replay",
        type=Path,
        metavar="JSONL",
        help="the op map's calls replayed (ootest ops replay): replayed again on the device "
        "in the replay step, the new file written over this one at the end (a file not "
        "there yet is written: the first replay, compared with the config's evidence)",
    )
    f.add_argument(
        "--no-replay",
        dest="replay_again",
        action="store_false",
        help="with --replay: keep it as it is, not replayed again (the variants it skips "
        "for a failed call are then not re-checked)",
    )
    f.add_argument(
        "--replay-all",
        action="store_true",
        help="with --replay: replay every call again, those that replayed ok before too "
        "(default: only the calls that did not replay ok, and new ones)",
    )
    f.add_argument("--scope", type=Path, metavar="FILE", help="select scope output")
    f.add_argument("-k", type=int, default=2, help="clean passes before mandatory (default 2)")
    f.add_argument("--max-rtol", type=float, default=None, help="as select refine --max-rtol")
    f.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="per-test timeout of the run (default: the config's 'timeout:', else 300)",
    )
    f.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="index processes")
    f.add_argument(
        "--torch-db",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="index the installed torch's op_db, module_db... (default: as --memory was built)",
    )
    f.add_argument("--fresh", action="store_true", help="start over, whatever --work holds")
    _add_judge(f)
    f.set_defaults(func=refresh, variants=[], root_var="TORCH_ROOT")


def refresh(args: argparse.Namespace) -> int:
    from ootest.select.refresh import Refresh
    from ootest.select.refresh import refresh as do_refresh

    check_timeout(args.timeout, "--timeout")
    job = Refresh(
        config=args.config,
        memory=args.memory,
        roots=tuple(args.roots),
        inputs=_inputs(args, _judging(args)),
        work=args.work,
        k=args.k,
        max_rtol=args.max_rtol,
        timeout=args.timeout,
        torch_db=args.torch_db,
        jobs=args.jobs,
        pytest_args=tuple(args.pytest_args or ()),
        fresh=args.fresh,
        replay_again=args.replay_again,
        replay_all=args.replay_all,
    )
    done = do_refresh(job, say=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"ootest: refresh: {'changed' if done.changed else 'unchanged'} {args.config}")
    print(f"  pull-request body: {done.pr_body}")
    print(f"  review page: {done.review}")
    return 0
