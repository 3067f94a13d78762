"""``ootest model record`` (imports no torch: the recording runs in the script's process)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ootest.errors import EXIT_INTERRUPTED, UserError

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?(\.exe)?")
_TAG = re.compile(r"[\w:+\-./]+")  # what a pytest mark name may hold (the tag becomes one)
_OPTS_WITH_VALUE = ("-W", "-X", "-Q")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("model", help="model-derived tests: record the calls a model run makes")
    msub = p.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    r = msub.add_parser(
        "record",
        help="run a Python script under a recorder and write its distinct calls as a config",
        description="Runs `python SCRIPT ...` or `python -m MODULE ...` (given after --) with "
        "a recording TorchFunctionMode and writes each distinct call it made (op, argument "
        "shapes, strides, dtypes, values, call site, count) as edits.ops.include entries of "
        "a test_suite_config. Tensor data is never written.",
    )
    r.add_argument(
        "--tag",
        required=True,
        help="tag of the test entry, e.g. model__my-model (selects it with -m tag__<tag>)",
    )
    r.add_argument("--out", type=Path, default=Path("ops.yaml"), help="config to write")
    r.add_argument(
        "--test",
        default=None,
        metavar="FILE::Class::test",
        help="the @ops test the entries are injected into (default: ootest's generic "
        "model-op test, which compares the device with the CPU)",
    )
    r.add_argument("--seed", type=int, default=0, help="global.input_config.seed (default 0)")
    r.set_defaults(func=record)


def _python(command: list[str]) -> tuple[str, list[str], list[str]]:
    """(interpreter, its options, SCRIPT ARGS... or -m MODULE ARGS...) of ``command``."""
    if not command:
        raise UserError(
            "give the command to record after --, e.g. "
            "ootest model record --tag model__mlp -- python my_model.py"
        )
    exe = command[0]
    if not _PYTHON.fullmatch(os.path.basename(exe)) and os.path.realpath(exe) != os.path.realpath(
        sys.executable
    ):
        raise UserError(
            "expected a Python command after -- (python SCRIPT [ARGS] or python -m MODULE "
            f"[ARGS]); found {exe!r}"
        )
    found = shutil.which(exe)
    if found is None:
        raise UserError(f"{exe!r} is not an executable on PATH; give the interpreter's path")
    rest = list(command[1:])
    opts: list[str] = []
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        opts.append(rest.pop(0))
        if opts[-1] in _OPTS_WITH_VALUE and rest:
            opts.append(rest.pop(0))
    if not rest:
        raise UserError(f"expected a script or -m MODULE after {exe!r}; found nothing")
    if rest[0] == "-c":
        raise UserError("python -c is not supported: put the code in a script and record that")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise UserError("expected a module name after -m")
    elif not Path(rest[0]).is_file():
        raise UserError(f"script not found: {rest[0]} (looked in {Path.cwd()})")
    return found, opts, rest


def record(args: argparse.Namespace) -> int:
    from ootest.model.write import DEFAULT_TEST, TestRef, config_text

    if not _TAG.fullmatch(args.tag):
        raise UserError(
            f"--tag: expected a valid pytest mark name (letters, digits, _ - . : + /), "
            f"e.g. model__my-model; found {args.tag!r}"
        )
    test = TestRef.parse(args.test or DEFAULT_TEST)
    from ootest.atomic import check_output, write_output

    check_output(args.out, "--out")  # before the script runs
    exe, opts, target = _python(list(args.pytest_args))
    # Both looked up without importing them: a Python lacking torch showed the
    # recorder's ModuleNotFoundError traceback before a line that did not say why.
    probe = subprocess.run(
        [
            exe,
            "-c",
            "import importlib.util as u, sys\n"
            "sys.exit(1 if u.find_spec('ootest') is None else 3 if u.find_spec('torch') is None "
            "else 0)",
        ],
        capture_output=True,
    )
    if probe.returncode == 3:
        raise UserError(
            f"{exe} cannot import torch; record with the Python your model runs with "
            "(one that has torch and ootest installed)"
        )
    if probe.returncode != 0:
        raise UserError(f"{exe} cannot import ootest; install ootest in that environment")
    from ootest.model.journal import read_journal

    interrupted = False
    with tempfile.TemporaryDirectory(prefix="ootest-record-") as tmp:
        calls, journal = Path(tmp) / "calls.json", Path(tmp) / "calls.journal"
        cmd = [exe, *opts, "-m", "ootest.model.record", "--out", str(calls),
               "--journal", str(journal), "--", *target]  # fmt: skip
        proc = subprocess.Popen(cmd)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            # the script got the Ctrl-C too: give it time to write what it recorded
            interrupted = True
            try:
                rc = proc.wait(timeout=30)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                proc.kill()
                rc = proc.wait()
        data: dict[str, Any] | None = None
        if calls.is_file():
            data = json.loads(calls.read_text())
        elif journal.is_file():  # it died without writing them: Note [Recording journal]
            data = read_journal(journal, rc)
        if data is None:
            print(
                f"ootest: the recording process ended (exit code {rc}) without writing its "
                "calls; nothing was written",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED if interrupted else 1
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    text = config_text(
        data,
        tag=args.tag,
        test=test,
        out_dir=out.parent,
        seed=args.seed,
        command=list(args.pytest_args),
    )
    write_output(out, text, "--out")
    n = len(data.get("calls") or [])
    print(f"ootest: {n} distinct calls ({data.get('total', 0)} in all) written to {out}")
    for why, count in list((data.get("left_out") or {}).items())[:10]:
        print(f"ootest: left out {count} x {why}", file=sys.stderr)
    code = data.get("exit_code")
    if code and isinstance(code, int) and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        print(
            f"ootest: the script died ({name}): {out} holds the calls recorded before it died",
            file=sys.stderr,
        )
    elif code:
        print(
            f"ootest: the script exited with {code}: {out} holds the calls made before it ended",
            file=sys.stderr,
        )
    if interrupted:
        return EXIT_INTERRUPTED
    return 1 if code else 0
