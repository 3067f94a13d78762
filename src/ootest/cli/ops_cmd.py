"""``ootest ops``: the op map (which aten ops each test variant calls).

Every action reads or writes one SQLite index (``--db``, default
``.ootest/ops.db``); none imports torch (the capture, which runs the tests,
is the integrator's ``ops capture``). Tables for people; ``--json`` for tools.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ootest.cache import OPS_DB
from ootest.errors import UserError
from ootest.opmap.ingest import ingest_files, merge_indexes

_DB_HELP = "the op map index (default: .ootest/ops.db)"


def add_parser(sub: Any) -> Any:
    """Register ``ootest ops``; returns its subparsers (``ops capture`` adds itself there)."""
    p = sub.add_parser(
        "ops", help="the op map: which ops each test calls, what enabling one unblocks"
    )
    osub = p.add_subparsers(dest="ops_command", required=True, metavar="ACTION")

    def action(name: str, help_: str, func: Any) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = osub.add_parser(name, help=help_)
        a.add_argument("--db", type=Path, default=OPS_DB, help=_DB_HELP)
        a.set_defaults(func=func)
        return a

    a = action("ingest", "add capture files (JSON lines) to the index", ingest)
    a.add_argument("captures", nargs="+", metavar="CAPTURE.jsonl")
    a.add_argument(
        "--memory",
        type=Path,
        metavar="DB",
        help="the memory of the tree captured: each record says which code it ran",
    )
    a = action("merge", "merge indexes (one per shard) into --db", merge)
    a.add_argument("sources", nargs="+", metavar="SHARD.db")
    a.add_argument(
        "--torch-version",
        metavar="V",
        help="the shards must be a capture of this torch version (checked, as every shard's "
        "torch and tree are)",
    )
    a.add_argument(
        "--tree-commit", metavar="SHA", help="the shards must be a capture of this test tree"
    )
    a = action("tests-for", "the variants calling an op (overload or packet)", tests_for)
    a.add_argument("op", metavar="OP", help="aten::add.Tensor, aten::add, add, aten.add.Tensor")
    a.add_argument("--limit", type=int, default=50, help="rows shown (default 50; 0: all)")
    a.add_argument("--json", action="store_true", help="every variant, as JSON")
    a = action("for-test", "the ops one variant calls", for_test)
    a.add_argument("variant", metavar="VARIANT", help="variant ID, or a unique prefix/substring")
    a.add_argument("--json", action="store_true")
    a = action("missing", "ops used but not supported, and which to enable first", missing)
    src = a.add_mutually_exclusive_group(required=True)
    src.add_argument("--supported", type=Path, metavar="FILE", help="YAML or text list of ops")
    src.add_argument(
        "--device",
        metavar="DEVICE",
        help="the backend: MODULE:NAME or NAME (probed in a child process) or emu:PROFILE",
    )
    src.add_argument("--detected", type=Path, metavar="JSON", help="a probe saved earlier")
    src.add_argument("--config", type=Path, metavar="FILE", help="a config's supported_ops")
    a.add_argument("--top", type=int, default=10, help="ops in the plan (default 10)")
    a.add_argument("--limit", type=int, default=30, help="ops ranked in the table (default 30)")
    a.add_argument("--json", action="store_true")
    a = action("enable", "the config diff that enables an op, and what it unblocks", enable)
    a.add_argument("op", metavar="OP")
    a.add_argument("--config", type=Path, required=True, metavar="FILE")
    a.add_argument("--in", dest="target", type=Path, metavar="FILE", help="the file to edit")
    a.add_argument("--write", action="store_true", help="edit the config file in place")
    a.add_argument("--limit", type=int, default=30, help="variants listed (default 30; 0: all)")
    a.add_argument(
        "--device",
        metavar="DEVICE",
        help="check that the backend (MODULE:NAME or NAME, probed) can run the op",
    )
    a.add_argument("--detected", type=Path, metavar="JSON", help="a probe saved earlier")
    a.add_argument("--json", action="store_true")
    a = action("affected", "the variants a backend change can affect", affected)
    how = a.add_mutually_exclusive_group(required=True)
    how.add_argument("--ops", metavar="OP,OP", help="changed ops, comma-separated")
    how.add_argument("--diff", metavar="BASE..HEAD", help="read kernel registrations in a diff")
    a.add_argument("--src", type=Path, metavar="DIR", help="the backend's git checkout (--diff)")
    a.add_argument("--out", type=Path, metavar="FILE", help="write the variant IDs, one a line")
    a.add_argument("--json", action="store_true")
    a = action("stats", "counts, captures and the most used ops", stats)
    a.add_argument("--top", type=int, default=20)
    a.add_argument("--json", action="store_true")
    a = action("replay", "run each recorded call on the device against the CPU", replay)
    a.add_argument("--device", required=True, metavar="DEVICE", help="emu:PROFILE or MODULE:NAME")
    a.add_argument("--out", type=Path, required=True, metavar="REPLAY.jsonl")
    a.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="per call (default 10)"
    )
    a.add_argument(
        "--presume-after",
        type=int,
        default=2,
        metavar="N",
        help="after N crashes (or hangs) of one op and dtype signature, its other calls "
        "are recorded as such without running (default 2; 0: run every call)",
    )
    a.add_argument("--show", type=int, default=20, help="faults listed (default 20; 0: all)")
    a.add_argument(
        "--keep-ok",
        type=Path,
        metavar="OLD.jsonl",
        help="an earlier replay on the same device: calls it replayed ok keep that result, "
        "the others and new calls are replayed (Note [A refresh replays what can change a "
        "decision])",
    )
    a.add_argument("-q", "--quiet", action="store_true", help="no progress")
    from ootest.cli import capture_cmd

    capture_cmd.add_parser(osub)
    return osub


# ------------------------------------------------------------------ helpers
def _console() -> Any:
    from ootest.untrusted import console as untrusted_console

    return untrusted_console(min_width=100, highlight=False)


def _esc(text: object) -> str:
    """Text from a capture (IDs, errors) for the console: control characters and
    rich's markup escaped (Note [Untrusted text])."""
    from ootest.untrusted import for_rich

    return for_rich(text)


def _dump(data: Any) -> int:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _flags(f: Any) -> dict[str, Any]:
    return {
        "device_dependent": f.uncertain,
        "device_branch": f.device_branch,
        "varies": f.varies,
        "partial": f.partial,
        "why": f.why,
    }


def _note(f: Any) -> str:
    return _esc(f.short())


def _store(args: argparse.Namespace, *, create: bool = False) -> Any:
    from ootest.opmap.store import OpStore

    return OpStore.open(args.db, create=create)


# ------------------------------------------------------------------ writing
def ingest(args: argparse.Namespace) -> int:
    code = None
    if args.memory is not None:
        from ootest.select.fresh import fingerprints

        code = fingerprints(args.memory)
    with _store(args, create=True) as store:
        rep = ingest_files(store, args.captures, code=code)
    _print_ingest(args.db, rep, "ingested")
    return 0


def merge(args: argparse.Namespace) -> int:
    if any(Path(s).resolve() == Path(args.db).resolve() for s in args.sources):
        raise UserError(f"merge: --db {args.db} is also a source; merge into another file")
    from ootest.opmap.shards import check_shards, read_shard, write_merged
    from ootest.opmap.store import OpStore

    records = []
    for source in args.sources:  # every shard checked before anything is merged
        with OpStore.open(source) as src:
            records.append((str(source), read_shard(src.connection, str(source))))
    whole = check_shards(records, torch_version=args.torch_version, tree_commit=args.tree_commit)
    with _store(args, create=True) as store:
        rep = merge_indexes(store, args.sources)
        if whole is not None:
            write_merged(store.connection, whole)
    _print_ingest(args.db, rep, "merged")
    if whole is not None:
        print(
            f"all {whole.shards} shard(s) of torch {whole.torch_version} at tree "
            f"{whole.tree_commit or '(unknown)'}"
        )
    return 0


def _print_ingest(db: Path, rep: Any, verb: str) -> None:
    print(
        f"{verb} {len(rep.sources)} file(s) into {db} in {rep.seconds:.1f} s: "
        f"{rep.variants} variant(s) touched, captures {rep.captures}, {rep.edges} edges in all"
    )
    for path in rep.truncated:
        print(f"{path}: the last line was cut short (the writer stopped mid-line); ignored it")


# ------------------------------------------------------------------ queries
def tests_for(args: argparse.Namespace) -> int:
    with _store(args) as store:
        limit = None if args.json or args.limit <= 0 else args.limit
        res = store.tests_for(args.op, limit=limit)
    if args.json:
        return _dump(
            {
                "op": res.query,
                "overloads": list(res.ops),
                "total": res.total,
                "variants": [
                    {"variant_id": h.variant_id, "modes": list(h.modes), "calls": h.calls}
                    | _flags(h.flags)
                    for h in res.variants
                ],
            }
        )
    from rich.table import Table

    con = _console()
    con.print(f"[b]{_esc(res.query)}[/b]: {res.total} variant(s)")
    table = Table()
    table.add_column("variant", overflow="fold")
    table.add_column("mode")
    table.add_column("calls", justify="right")
    table.add_column("note", overflow="fold", max_width=24)
    for h in res.variants:
        table.add_row(_esc(h.variant_id), ",".join(h.modes), str(h.calls), _note(h.flags))
    con.print(table)
    con.print(f"overloads: {_esc(', '.join(res.ops))}")
    if res.total > len(res.variants):
        con.print(
            f"... and {res.total - len(res.variants)} more (--limit 0 or --json for all; "
            "shown: the first captured)"
        )
    return 0


def for_test(args: argparse.Namespace) -> int:
    with _store(args) as store:
        res = store.for_test(args.variant)
    if args.json:
        return _dump(
            {
                "variant_id": res.variant_id,
                "nodeid": res.nodeid,
                "file": res.file,
                **_flags(res.flags),
                "ops": [vars(o) for o in res.ops],
                "captures": [
                    {
                        "capture": e.capture.id,
                        "device": e.capture.device,
                        "profile": e.capture.profile,
                        "torch_version": e.capture.torch_version,
                        "outcome": e.outcome,
                        "stopped_on": e.stopped_on,
                        "error": e.error,
                        "n_ops": e.n_ops,
                        "code": e.code,
                    }
                    for e in res.captures
                ],
            }
        )
    from rich.table import Table

    con = _console()
    con.print(f"[b]{_esc(res.variant_id)}[/b]: {len({o.op for o in res.ops})} op(s)")
    table = Table()
    table.add_column("op")
    table.add_column("mode")
    table.add_column("calls", justify="right")
    table.add_column("dtypes seen")
    table.add_column("written down", justify="right")
    for o in res.ops:
        table.add_row(_esc(o.op), o.mode, str(o.calls), ", ".join(o.dtypes), str(o.examples or ""))
    con.print(table)
    for e in res.captures:
        stop = f", stopped on {e.stopped_on}" if e.stopped_on else ""
        err = f" ({e.error})" if e.error else ""
        outcome = e.outcome or "no outcome recorded"
        code = f"; code {e.code[:12]}" if e.code else "; code of unknown origin"
        con.print(f"{_esc(e.capture.label())}: {_esc(outcome + stop + err + code)}")
    if res.flags.uncertain or res.flags.partial:
        con.print(f"[yellow]{_esc(res.flags.note())}[/yellow]")
    if res.file or res.nodeid:
        con.print(f"[dim]file {_esc(res.file)}, node ID {_esc(res.nodeid)}[/dim]")
    return 0


def _support(args: argparse.Namespace) -> tuple[Any, list[str]]:
    from ootest.select.backend import support_set

    return support_set(args.device, args.detected, args.supported, args.config)


def _device_check(args: argparse.Namespace, covers: list[str]) -> str | None:
    from ootest.select.backend import cannot_run

    return cannot_run(args.device, args.detected, covers)


def missing(args: argparse.Namespace) -> int:
    from ootest.opmap.missing import missing as compute

    if args.top < 0:
        raise UserError(f"--top {args.top}: expected 0 or more ops")
    sup, notes = _support(args)
    with _store(args) as store:
        rep = compute(store, sup, top=args.top)
    if args.json:
        return _dump(
            {
                "source": rep.source,
                "variants": rep.total,
                "blocked": rep.blocked,
                "needs": [vars(n) | {"overloads": list(n.overloads)} for n in rep.needs],
                "plan": [vars(s) for s in rep.plan],
                "notes": notes,
            }
        )
    from rich.table import Table

    con = _console()
    for n in notes:
        con.print(f"[dim]note: {_esc(n)}[/dim]")
    con.print(
        f"{rep.blocked} of {rep.total} variants call an op {_esc(rep.source)} does not support"
    )
    con.print("[b]missing ops[/b], by the variants each would unblock alone")
    table = Table()
    table.add_column("op (rule)")
    table.add_column("unblocks alone", justify="right")
    table.add_column("variants calling", justify="right")
    table.add_column("overloads", overflow="fold")
    shown = rep.needs if args.limit <= 0 else rep.needs[: args.limit]
    for need in shown:
        alone = str(need.alone) + (
            f" ({need.alone_uncertain} may differ per device)" if need.alone_uncertain else ""
        )
        over = ", ".join(need.overloads[:4]) + (" ..." if len(need.overloads) > 4 else "")
        table.add_row(_esc(need.rule), alone, str(need.variants), _esc(over))
    con.print(table)
    if len(rep.needs) > len(shown):
        con.print(f"... and {len(rep.needs) - len(shown)} more ops (--limit 0 or --json)")
    if rep.plan:
        done = rep.plan[-1].cumulative
        con.print(
            f"[b]enable these {len(rep.plan)} ops to unblock {done} variants[/b] "
            "(greedy: each the op that unblocks the most given the ones before):"
        )
        for i, s in enumerate(rep.plan, 1):
            con.print(f"  {i:2d}. {_esc(s.rule):30s} +{s.unblocks:<7d} = {s.cumulative}")
    return 0


def enable(args: argparse.Namespace) -> int:
    from ootest.opmap.enable import enable as compute

    with _store(args) as store:
        rep = compute(store, args.config, args.op, target=args.target)
    warning = _device_check(args, list(rep.covers))
    if warning is not None:
        rep.notes.append(warning)
    written = False
    if args.write and rep.edit is not None:
        rep.edit.write()
        written = True
    if args.json:
        return _dump(
            {
                "op": rep.op,
                "config": str(rep.config),
                "file": str(rep.target) if rep.target else None,
                "diff": rep.edit.diff if rep.edit else "",
                "written": written,
                "already": rep.already,
                "covers": list(rep.covers),
                "unblocked": [
                    {"variant_id": u.variant_id} | _flags(u.flags) for u in rep.unblocked
                ],
                "still_blocked": [
                    {"variant_id": s.variant_id, "missing": list(s.missing)} | _flags(s.flags)
                    for s in rep.still_blocked
                ],
                "entries": [vars(e) for e in rep.entries],
                "notes": rep.notes,
            }
        )
    con = _console()
    for n in rep.notes:
        con.print(f"[dim]note: {_esc(n)}[/dim]")
    if rep.already and rep.edit is None:
        con.print(f"nothing to change: {_esc(rep.already)}")
        return 0
    if rep.already:
        con.print(f"[yellow]{_esc(rep.already)}[/yellow]")
    assert rep.edit is not None
    sys.stdout.write(rep.edit.diff)
    sys.stdout.flush()
    con.print(
        f"{'wrote' if written else 'would write (--write to apply)'} {_esc(rep.edit.path)}; "
        f"{_esc(rep.op)} covers {_esc(', '.join(rep.covers) or 'no recorded op')}"
    )
    limit = None if args.limit <= 0 else args.limit
    con.print(
        f"[b]{len(rep.unblocked)} variant(s) waited only on {_esc(rep.op)}[/b] (now unblocked):"
    )
    for u in rep.unblocked[:limit]:
        note = f"  [yellow]({_note(u.flags)})[/yellow]" if _note(u.flags) else ""
        con.print(f"  {_esc(u.variant_id)}{note}")
    _more(con, rep.unblocked, limit)
    con.print(f"[b]{len(rep.still_blocked)} variant(s) calling it still miss other ops:[/b]")
    for s in rep.still_blocked[:limit]:
        con.print(f"  {_esc(s.variant_id)}: {_esc(', '.join(s.missing))}")
    _more(con, rep.still_blocked, limit)
    if rep.entries:
        con.print("config entries that may be removable now (check with a run; not edited):")
        for e in rep.entries:
            said = " (its reason names the op)" if e.mentions_op else ""
            why = f": {e.reason}" if e.reason else ""
            con.print(f"  {_esc(e.origin)}: {_esc(e.what)}{_esc(why)}{said}")
    return 0


def _more(con: Any, items: list[Any], limit: int | None) -> None:
    if limit is not None and len(items) > limit:
        con.print(f"  ... and {len(items) - limit} more (--limit 0 or --json for all)")


def affected(args: argparse.Namespace) -> int:
    from ootest.opmap.affected import affected_by

    with _store(args) as store:
        rep = affected_by(store, args.ops, args.src, args.diff)
    change = rep.change
    if args.out is not None:
        from ootest.atomic import check_output, write_output

        check_output(args.out, "--out")
        write_output(args.out, "".join(f"{v}\n" for v in rep.variants), "--out")
    if args.json:
        return _dump(
            {
                "everything": rep.everything,
                "reasons": rep.reasons,
                "ops": rep.ops,
                "per_op": rep.per_op,
                "unknown_ops": rep.unknown_ops,
                "kept": len(rep.variants),
                "total": rep.total,
                "uncertain_kept": rep.uncertain_kept,
                "unmapped": [vars(u) for u in change.unmapped] if change else [],
                "ignored": change.ignored if change else [],
                "variants": rep.variants,
                "out": str(args.out) if args.out else None,
            }
        )
    con = _console()
    if change is not None:
        for f in change.ignored:
            con.print(f"[dim]ignored {_esc(f)}[/dim]")
    for op in rep.ops:
        if op in rep.per_op:
            con.print(f"{_esc(op)}: {rep.per_op[op]} variant(s) call it")
    for op in rep.unknown_ops:
        con.print(f"[yellow]{_esc(op)}: not in the op map (no captured variant calls it)[/yellow]")
    if rep.everything:
        con.print("[yellow]run everything[/yellow]:")
        for r in rep.reasons:
            con.print(f"  {_esc(r)}")
    elif rep.uncertain_kept:
        con.print(f"kept {rep.uncertain_kept} variant(s) whose ops may differ per device")
    where = f"; wrote {_esc(args.out)}" if args.out else ""
    con.print(f"kept {len(rep.variants)} of {rep.total} variants{where}")
    return 0


def stats(args: argparse.Namespace) -> int:
    with _store(args) as store:
        st = store.stats(top=args.top)
    if args.json:
        return _dump(
            {
                "variants": st.variants,
                "ops": st.ops,
                "edges": st.edges,
                "device_dependent": st.device_dependent,
                "partial": st.partial,
                "captures": [vars(c) for c in st.captures],
                "top_ops": [{"op": o, "variants": n} for o, n in st.top_ops],
            }
        )
    from rich.table import Table

    con = _console()
    con.print(
        f"{_esc(args.db)}: {st.variants} variants, {st.ops} ops, {st.edges} edges, "
        f"{len(st.captures)} capture(s); {st.device_dependent} variant(s) may differ per "
        f"device, {st.partial} with a possibly incomplete op set"
    )
    for c in st.captures:
        con.print(f"  {_esc(c.label())} from {_esc(c.source)}")
    con.print(f"[b]top {len(st.top_ops)} ops[/b] by variants calling them")
    table = Table()
    table.add_column("op")
    table.add_column("variants", justify="right")
    for op, n in st.top_ops:
        table.add_row(_esc(op), str(n))
    con.print(table)
    return 0


# ------------------------------------------------------------------ replay
def _keep_ok(
    old: Path,
    device: str,
    examples: list[tuple[str, str, str]],
    rep: Any,
    unplaced: dict[str, dict[str, Any]],
) -> list[tuple[str, str, str]]:
    """Note [A refresh replays what can change a decision]: the calls ``old`` (a
    replay on ``device``) replayed ok go into ``rep`` as they were; the others are
    returned, to replay (those the device could not take the inputs of, with their
    row, into ``unplaced``: re-checked by placement first)."""
    from ootest.opmap.replay import read_replay

    before = read_replay(old)
    if before.header.get("device") != device:
        raise UserError(
            f"--keep-ok {old}: a replay on {before.header.get('device')!r}, not on {device!r}; "
            "pass a replay on the same device, or none to replay every call"
        )
    todo = []
    for key, op, call in examples:
        row = before.results.get(key)
        if row is not None and row.get("status") == "ok" and row.get("op") == op:
            rep.results[key] = row
        else:
            todo.append((key, op, call))
            if row is not None and row.get("op") == op and _unplaced_row(row):
                unplaced[key] = row
    return todo


def _unplaced_row(row: dict[str, Any]) -> bool:
    """A row of a call the device could not take the inputs of (the CPU ran it)."""
    from ootest.device.replay_worker import UNPLACED

    return row.get("status") == "failed" and str(row.get("detail", "")).startswith(f"{UNPLACED}: ")


def replay(args: argparse.Namespace) -> int:
    """Note [Replaying calls]: every call example of the index, on the device."""
    from ootest.atomic import check_output
    from ootest.device import check_device
    from ootest.opmap.replay import FAULTS, new_replay, replay, write_replay
    from ootest.timeout import check_timeout

    check_timeout(args.timeout, "--timeout")
    if args.presume_after < 0:
        raise UserError(f"--presume-after: expected 0 or more calls; found {args.presume_after}")
    check_device(args.device)
    check_output(args.out, "--out")
    with _store(args) as store:
        examples = store.examples()
    if not examples:
        raise UserError(
            f"{args.db}: the op map holds no call examples; capture with this ootest "
            "(`ootest ops capture ...`) to record them"
        )
    con = _console()
    rep = new_replay(args.device, len(examples), args.timeout)
    rep.header["op_map"] = str(args.db)
    total = len(examples)
    unplaced: dict[str, dict[str, Any]] = {}
    if args.keep_ok is not None:
        examples = _keep_ok(args.keep_ok, args.device, examples, rep, unplaced)
        rep.header["kept_ok"] = total - len(examples)
        con.print(
            f"{total - len(examples)} of {total} recorded calls replayed ok on "
            f"{_esc(args.device)} in {_esc(args.keep_ok)}: kept as they were"
        )
    con.print(f"replaying {len(examples)} recorded calls on {_esc(args.device)} against the CPU")
    from rich.progress import Progress

    from ootest.cli.interrupt import term_as_interrupt

    def kept() -> str:
        return (
            f"{len(rep.results)} of {total} calls replayed, kept in {args.out} "
            "(marked incomplete; run the replay again to finish)"
        )

    try:  # SIGTERM (a cancelled CI job) stops the worker like Ctrl-C
        with (
            term_as_interrupt(kept),
            Progress(console=con, transient=True, disable=args.quiet) as bar,
        ):
            task = bar.add_task("calls", total=len(examples))
            skipped = total - len(examples)  # kept, not replayed
            replay(
                examples,
                args.device,
                timeout=args.timeout,
                presume_after=args.presume_after,
                on_progress=lambda done, _: bar.update(task, completed=done - skipped),
                into=rep,
                unplaced=unplaced,
            )
            rep.header["complete"] = len(rep.results) == total
    finally:
        write_replay(args.out, rep)  # what was done is kept, whatever stopped it
    counts = rep.counts()
    presumed = sum(1 for r in rep.results.values() if r.get("presumed"))
    raised = sum(1 for r in rep.results.values() if r.get("error_path"))
    con.print(
        ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        + (f" ({raised} of the ok raise on the device as on the CPU)" if raised else "")
        + (f" ({presumed} of them presumed, not run)" if presumed else "")
        + f"; written to {_esc(args.out)}"
    )
    faults = sorted(
        (r for r in rep.results.values() if r["status"] in FAULTS),
        key=lambda r: (FAULTS.index(r["status"]), r["op"], r["key"]),
    )
    if faults:
        from rich.table import Table

        table = Table(title="calls that do not behave as on the CPU")
        for col in ("op", "status", "what happened", "example"):
            table.add_column(col)
        shown = faults if args.show == 0 else faults[: args.show]
        for r in shown:
            what = (f"{r['error']}: " if r.get("error") else "") + str(r.get("detail", ""))
            what = what if len(what) <= 90 else what[:87] + "..."
            table.add_row(_esc(r["op"]), r["status"], _esc(what), r["key"])
        con.print(table)
        if len(shown) < len(faults):
            con.print(f"... and {len(faults) - len(shown)} more (--show 0 lists all)")
    return 0
