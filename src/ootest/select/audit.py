"""Measuring selection quality: ``ootest select audit`` (see docs/select.md).

Note [Selection audit]
A skip that should have been a run costs coverage nobody sees, so the share of
skipped and xfailed variants that really pass (the false-skip rate) is measured,
not assumed:

1. the *population* is every variant of the evidence sidecar that the config
   (as it is now, people's edits included: ``ootest.config.decide``) skips or
   xfails; its reason code is the sidecar's, or ``edited:<bucket>`` where the
   config no longer gives the mode the selection wrote; with ``--memory`` or
   ``--variants``, also the variants that exist but have no row (added upstream
   since, missed by a collection: nobody decided them), ``unlisted:<bucket>``;
2. a seeded simple random sample of ``N`` of them (``--reason`` narrows the
   population first) is run, and only it: a config written next to the original
   (so ``path:`` values and file keys resolve the same) lists each sampled
   variant by its axes as ``mandatory_success``, every file's other tests are
   skipped, and ``global:`` gating is dropped (that too is a decision being
   audited); the precision the original's ``global:`` gives a dtype is kept;
   its results, JUnit, HTML and log go to ``<config>.audit/``;
3. a sampled variant that passes is a false skip; one that fails, errors,
   crashes or times out is a true one; one the test itself skips, or that did
   not run at all, is not measured and left out of the rate;
4. the rate and its 95% Wilson score interval are given overall, per reason
   code (the part before the first ``:``) and per mode. A simple random sample
   estimates each stratum without bias; small strata give wide intervals, which
   is the honest answer.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.errors import UserError
from ootest.record.signature import signature
from ootest.select.writer import split_id

#: The two-sided 95% quantile of the standard normal distribution.
Z95 = 1.959963984540054

_PASS = frozenset({"passed", "xpassed", "xpassed_strict"})
_FAIL = frozenset({"failed", "error", "crashed", "timeout", "xfailed"})


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial proportion (None for ``n == 0``).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at
    0 or ``n`` successes: with 0 of 10 the 95% upper bound is 0.278, not 0.
    """
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}]; found {successes}")
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Member:
    """One skipped or xfailed variant of the population."""

    variant_id: str
    mode: str
    reason: str  # the sidecar's reason code, or edited:<bucket>

    @property
    def family(self) -> str:
        return self.reason.split(":", 1)[0]


@dataclass
class Population:
    members: list[Member]
    variants: int = 0  # rows of the sidecar
    mandatory: int = 0  # the config runs them as mandatory_success
    not_in_config: int = 0  # their file is not (or no longer) in the config
    unlisted: int = 0  # variants that exist but have no row: nobody decided them


def population(config: Path, known: Iterable[str] = ()) -> tuple[Population, Any, dict[str, Any]]:
    """The skipped and xfailed variants of ``config`` (its sidecar's rows, decided by
    the config as it is now), and of ``known`` (variant IDs that exist, from the
    memory or a collection) those the sidecar lacks: no one decided them, the
    config gives them a mode all the same (``unlisted``, Note [Undecided variants
    run]); also the loaded config and its files by file key."""
    from ootest.config.decide import Context, decide
    from ootest.opmap.enable import variant_from_id
    from ootest.select.refine import read_sidecar, sidecar_path

    rows = read_sidecar(sidecar_path(config))
    cfg, by_key = config_files(config)
    ctx = Context.current()
    pop = Population([], variants=len(rows))
    decided = {d.variant_id for _ev, d, _fp in rows}
    undecided = [(vid, None) for vid in sorted(set(known) - decided)]
    for vid, d in [*((d.variant_id, d) for _ev, d, _fp in rows), *undecided]:
        rf = by_key.get(split_id(vid)[0])
        v = variant_from_id(vid)
        if rf is None or v is None:
            pop.not_in_config += d is not None
            continue
        now = decide(rf, cfg.suite.global_, v, ctx)
        if d is None:
            pop.unlisted += 1
        if now.mode == "mandatory_success":
            pop.mandatory += 1
            continue
        if d is None:
            reason = "unlisted" if now.bucket == "unlisted" else f"unlisted:{now.bucket}"
        else:
            reason = d.reason if now.mode == d.mode else f"edited:{now.bucket}"
        pop.members.append(Member(vid, now.mode, reason))
    pop.members.sort(key=lambda m: m.variant_id)
    return pop, cfg, by_key


def config_files(config: Path) -> tuple[Any, dict[str, Any]]:
    """The loaded ``config`` and its resolved files by file key."""
    from ootest.config.load import load_config
    from ootest.config.paths import file_keys

    cfg = load_config(config)
    keys = file_keys(cfg.source, (t for t, _ in cfg.resolved))
    return cfg, {keys.key(rf.path): rf for rf in cfg.files}


def matches_reason(reason: str, wanted: str) -> bool:
    """``--reason op_unsupported`` takes every ``op_unsupported:<op>``; a full
    code takes only itself."""
    return reason == wanted or reason.startswith(wanted + ":")


def draw(members: list[Member], n: int, seed: int) -> list[Member]:
    """A simple random sample of ``n`` members (all of them when there are fewer),
    the same for the same members, ``n`` and seed; sorted by variant ID."""
    ordered = sorted(members, key=lambda m: m.variant_id)
    if n >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, n), key=lambda m: m.variant_id)


def audit_path(config: Path) -> Path:
    """The audit config: next to ``config``, so paths and file keys resolve the same."""
    stem = config.name.removesuffix(".yaml").removesuffix(".yml")
    return config.with_name(f"{stem}.audit.yaml")


def results_path(config: Path) -> Path:
    """Default results of the audit run, in a folder of their own (``ootest run``
    writes its JUnit, HTML and log next to the results)."""
    return audit_path(config).with_suffix("") / "results.jsonl"


def _precision(caps: Any, v: Any) -> list[tuple[str, dict[str, float]]]:
    """The precision the original's ``global:`` gives each dtype of ``v``:
    ``supported_ops[op].dtypes`` first, then ``supported_dtypes``."""
    out = []
    op = None
    if v.op is not None and caps.supported_ops:
        names = (v.op, v.op.rsplit(".", 1)[0])
        op = next((r for r in caps.supported_ops if r.name in names), None)
    for dt in v.dtypes:
        own = (op.dtypes or []) if op is not None else []
        refs = [r for r in [*own, *(caps.supported_dtypes or [])] if r.name == dt]
        prec = next((r.precision for r in refs if r.precision is not None), None)
        if prec is not None:
            out.append((dt, prec.model_dump(exclude_none=True)))
    return out


def audit_config(
    cfg: Any, by_key: Mapping[str, Any], chosen: Iterable[Member], header: list[str]
) -> str:
    """The config that runs exactly ``chosen`` (Note [Selection audit])."""
    import yaml

    from ootest.opmap.enable import variant_from_id

    files: dict[int, dict[str, Any]] = {}
    for m in chosen:
        file, template, axes = split_id(m.variant_id)
        rf = by_key[file]
        entry = files.get(id(rf.entry))
        if entry is None:
            entry = {"path": rf.entry.path, "unlisted_test_mode": "skip"}
            if rf.entry.device_restrictions != "keep":
                entry["device_restrictions"] = rf.entry.device_restrictions
            entry["tests"] = [{"names": [], "mode": "mandatory_success"}]
            files[id(rf.entry)] = entry
        name = f"{template}[{axes}]" if axes else template
        prec = _precision(cfg.suite.global_, variant_from_id(m.variant_id))
        if prec:
            edits = {"dtypes": {"include": [{"name": d, "precision": p} for d, p in prec]}}
            entry["tests"].append({"names": [name], "mode": "mandatory_success", "edits": edits})
        else:
            entry["tests"][0]["names"].append(name)
    for entry in files.values():
        entry["tests"] = [t for t in entry["tests"] if t["names"]]
    suite: dict[str, Any] = {}
    if cfg.suite.device:
        suite["device"] = cfg.suite.device
    if cfg.suite.timeout:
        suite["timeout"] = cfg.suite.timeout
    suite["files"] = list(files.values())
    body = yaml.safe_dump({"test_suite_config": suite}, sort_keys=False, width=4096)
    return "".join(f"# {h}\n" for h in header) + body


def run_sample(
    config: Path,
    results: Path,
    *,
    device: str | None,
    timeout: float,
    pytest_args: list[str],
    resume: bool = False,
    what: str = "select audit: running the sample",
) -> None:
    """``ootest run`` the audit config in a subprocess (it never imports torch here);
    ``resume``: keep the results already in ``results`` and run only what they lack."""
    cmd = [sys.executable, "-m", "ootest.cli", "run", str(config)]
    cmd += ["--resume" if resume else "--results", str(results), "-q", "--timeout", str(timeout)]
    if device:
        cmd += ["--device", device]
    if pytest_args:
        cmd += ["--", *pytest_args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1, 3):  # 1: sampled variants failed; 3: the guard tripped
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise UserError(
            f"{what} with {config} failed (ootest run exit "
            f"status {r.returncode}); its output ends:\n{tail}"
        )


@dataclass
class Cell:
    """Counts and the false-skip rate of one group of the population."""

    population: int = 0
    sampled: int = 0
    passed: int = 0  # false skips
    failed: int = 0  # true skips
    not_measured: int = 0  # skipped by the test itself, or no result

    @property
    def measured(self) -> int:
        return self.passed + self.failed

    @property
    def rate(self) -> float | None:
        return self.passed / self.measured if self.measured else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson(self.passed, self.measured)

    def to_json(self) -> dict[str, Any]:
        ci = self.interval
        return {
            "population": self.population,
            "sampled": self.sampled,
            "measured": self.measured,
            "passed": self.passed,
            "failed": self.failed,
            "not_measured": self.not_measured,
            "false_skip_rate": self.rate,
            "ci95": list(ci) if ci else None,
        }


@dataclass
class AuditReport:
    seed: int
    requested: int
    population: Population
    overall: Cell = field(default_factory=Cell)
    by_reason: dict[str, Cell] = field(default_factory=dict)
    by_mode: dict[str, Cell] = field(default_factory=dict)
    variants: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "sample": self.requested,
            "variants_in_evidence": self.population.variants,
            "mandatory": self.population.mandatory,
            "not_in_config": self.population.not_in_config,
            "unlisted": self.population.unlisted,
            "overall": self.overall.to_json(),
            "by_reason": {k: c.to_json() for k, c in sorted(self.by_reason.items())},
            "by_mode": {k: c.to_json() for k, c in sorted(self.by_mode.items())},
            "variants": self.variants,
        }


def tally(
    pop: Population,
    members: list[Member],
    chosen: list[Member],
    results: Mapping[str, dict[str, Any]],
    seed: int,
    requested: int,
) -> AuditReport:
    """The report: ``members`` is the (filtered) population, ``chosen`` the sample,
    ``results`` the audit run's last record per variant ID."""
    rep = AuditReport(seed, requested, pop)

    def cells(m: Member) -> list[Cell]:
        return [
            rep.overall,
            rep.by_reason.setdefault(m.family, Cell()),
            rep.by_mode.setdefault(m.mode, Cell()),
        ]

    for m in members:
        for c in cells(m):
            c.population += 1
    for m in chosen:
        rec = results.get(m.variant_id)
        outcome = str(rec["outcome"]) if rec is not None else "not_run"
        row: dict[str, Any] = {
            "variant_id": m.variant_id,
            "mode": m.mode,
            "reason": m.reason,
            "outcome": outcome,
        }
        for c in cells(m):
            c.sampled += 1
            if outcome in _PASS:
                c.passed += 1
            elif outcome in _FAIL:
                c.failed += 1
            else:
                c.not_measured += 1
        row["false_skip"] = outcome in _PASS if outcome in _PASS | _FAIL else None
        if rec is not None and outcome in _FAIL:
            row["signature"] = signature(rec).code
            row["signature_text"] = str(signature(rec))
        rep.variants.append(row)
    return rep


def audit(
    config: Path,
    *,
    sample: int,
    seed: int = 0,
    reason: str | None = None,
    known: Iterable[str] = (),
    device: str | None = None,
    timeout: float | None = None,
    results: Path | None = None,
    pytest_args: Iterable[str] = (),
    say: Callable[[str], None] = lambda line: None,
) -> AuditReport:
    """Draw ``sample`` of the variants ``config`` skips or xfails (those whose reason
    code is ``reason``, if given; ``known`` adds variants it does not list), run them
    as mandatory_success on the device, and tally what passed. ``say`` hears what is
    being run."""
    from ootest.atomic import write_output
    from ootest.record.results import RunData

    if sample < 1:
        raise UserError(f"--sample: expected at least 1 variant; found {sample}")
    pop, cfg, by_key = population(config, known)
    members = pop.members
    if reason:
        members = [m for m in members if matches_reason(m.reason, reason)]
        if not members and pop.members:  # a mistyped code was an empty audit, exit 0
            codes = sorted({m.reason.split(":")[0] for m in pop.members})
            raise UserError(
                f"--reason {reason}: no skipped or xfailed variant of {config} has "
                f"that reason code; expected one of: {', '.join(codes)}"
            )
    chosen = draw(members, sample, seed)
    records: dict[str, dict[str, Any]] = {}
    if chosen:
        path = audit_path(config)
        header = [
            f"Generated by `ootest select audit {config.name}`: runs exactly the "
            f"{len(chosen)} sampled variants",
            f"(seed {seed}, of {len(members)} skipped or xfailed) as mandatory_success.",
        ]
        write_output(path, audit_config(cfg, by_key, chosen, header), "--out")
        out = results or results_path(config)
        say(
            f"ootest: audit: running {len(chosen)} of {len(members)} skipped or xfailed "
            f"variants (seed {seed}) with {path}"
        )
        run_sample(
            path,
            out,
            device=device,
            timeout=timeout or cfg.suite.timeout or 300.0,
            pytest_args=list(pytest_args),
        )
        records = RunData.load(out).results
    else:
        say("ootest: audit: the config skips or xfails none of its variants")
    return tally(pop, members, chosen, records, seed, sample)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(c: Cell) -> str:
    ci = c.interval
    return "-" if ci is None else f"{_pct(ci[0])} - {_pct(ci[1])}"


def print_report(rep: AuditReport, console: Any = None) -> None:
    """The report as a rich table, then the false skips found."""
    from rich.table import Table

    from ootest.untrusted import console as untrusted_console
    from ootest.untrusted import for_rich as escape  # Note [Untrusted text]

    console = console or untrusted_console(min_width=120)
    t = Table(title=f"false-skip rate (seed {rep.seed}; 95% Wilson interval)")
    t.add_column("reason / mode", no_wrap=True)
    for col in ("population", "sampled", "passed", "failed", "not measured"):
        t.add_column(col, justify="right")
    t.add_column("false-skip rate", justify="right")
    t.add_column("95% CI", justify="right", no_wrap=True)

    def row(name: str, c: Cell, **kw: Any) -> None:
        t.add_row(
            escape(name),
            str(c.population),
            str(c.sampled),
            str(c.passed),
            str(c.failed),
            str(c.not_measured),
            _pct(c.rate),
            _ci(c),
            **kw,
        )

    for name, c in sorted(rep.by_reason.items()):
        row(name, c)
    t.add_section()
    for name, c in sorted(rep.by_mode.items()):
        row(f"mode {name}", c)
    t.add_section()
    row("all", rep.overall, style="bold")
    console.print(t)
    if rep.population.unlisted:
        console.print(
            f"{rep.population.unlisted} variants exist with no decision (unlisted: added "
            "since the selection, or missed by its collection): sampled as the rest"
        )
    false = [v for v in rep.variants if v["false_skip"]]
    if false:
        console.print(f"false skips ({len(false)}): they pass; re-decide them")
        for v in false[:20]:
            console.print(f"  {escape(v['variant_id'])}  ({escape(v['reason'])})", soft_wrap=True)
        if len(false) > 20:
            console.print(f"  ... and {len(false) - 20} more (--json lists all)")
