"""One exit-code table (ootest.errors), pinned, and what the CLI returns for each kind."""

from __future__ import annotations

import pytest

from ootest import errors
from ootest.cli import main as cli


def test_the_exit_code_table_is_pinned() -> None:
    table = {
        n: getattr(errors, n)
        for n in dir(errors)
        if n.startswith("EXIT_") and isinstance(getattr(errors, n), int)
    }
    assert table == {
        "EXIT_OK": 0,
        "EXIT_PIPE": 141,
        "EXIT_FAILED": 1,
        "EXIT_USAGE": 2,
        "EXIT_GUARD": 3,
        "EXIT_BUG": 70,
        "EXIT_INTERRUPTED": 130,
    }
    assert "exit code 70" in (errors.__doc__ or "")


def test_user_errors_bugs_and_interrupts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def raiser(exc: BaseException) -> object:
        def f(args: object) -> int:
            raise exc

        return f

    import argparse

    for exc, code in (
        (errors.UserError("bad thing"), errors.EXIT_USAGE),
        (RuntimeError("oops"), errors.EXIT_BUG),
        (KeyboardInterrupt(), errors.EXIT_INTERRUPTED),
    ):

        class Parser:
            def parse_args(self, argv: object, exc: BaseException = exc) -> argparse.Namespace:
                return argparse.Namespace(func=raiser(exc))

        monkeypatch.setattr(cli, "_parser", Parser)
        assert cli.main(["anything"]) == code
    err = capsys.readouterr().err
    assert "ootest: error: bad thing" in err and "internal error" in err
