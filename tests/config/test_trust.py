"""Issue 28 items 1-3: a config from a pull request reads no file outside its
roots, leaks no environment variable and evaluates nothing. The hostile inputs
are gathered here; each test prints how many it tried (``-s`` shows it)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ootest.config.load import load_config
from ootest.errors import ConfigError
from tests.conftest import ootest

SECRET = "hunter2-SUPERSECRET"


def _problems(cfg: Path, env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load_config(cfg, env=env, check_paths=False)
    return [str(p) for p in ei.value.problems]


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A config folder, a folder beside it (outside every root) and the roots."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    torch_root, device_root, allowed = (tmp_path / n for n in ("torch", "device", "allowed"))
    for d in (work, outside, torch_root, device_root, allowed, work / "sub"):
        d.mkdir()
    base = "test_suite_config:\n  labels: [base]\n"
    for d in (outside, torch_root, device_root, allowed, work / "sub"):
        (d / "base.yaml").write_text(base)
    (outside / "secrets.yaml").write_text(f"password: {SECRET}\n")
    (work / ".env").write_text(f"DB_PASSWORD={SECRET}\n")
    (work / "secrets.yaml").write_text(f"DB_PASSWORD: {SECRET}\nAPI_KEY: {SECRET}\n")
    (work / "token.yaml").write_text(f"{SECRET} {SECRET}\n")
    (work / "list.yaml").write_text(f"- {SECRET}\n")
    (work / "number.yaml").write_text("12345\n")
    (work / "link.yaml").symlink_to(outside / "base.yaml")
    (work / "passwd.yaml").symlink_to("/etc/passwd")
    (work / "dir.yaml").mkdir()
    os.mkfifo(work / "fifo.yaml")
    return {
        "work": work,
        "outside": outside,
        "TORCH_ROOT": torch_root,
        "TORCH_DEVICE_ROOT": device_root,
        "allowed": allowed,
    }


def _env(tree: dict[str, Path], **more: str) -> dict[str, str]:
    return {
        "TORCH_ROOT": str(tree["TORCH_ROOT"]),
        "TORCH_DEVICE_ROOT": str(tree["TORCH_DEVICE_ROOT"]),
        "PATH": os.environ.get("PATH", ""),
        **more,
    }


NOT_YAML = "expected a YAML config file (.yaml or .yml); found {}. Extend only ootest configs"
OUTSIDE = (
    "expected a config inside the config's folder, ${{TORCH_ROOT}}, ${{TORCH_DEVICE_ROOT}} or a "
    "folder of $OOTEST_EXTENDS_PATH; found {}, outside them. Move it into one, or add its "
    "folder to OOTEST_EXTENDS_PATH"
)
NOT_CONFIG = (
    "expected a config (a mapping with key 'test_suite_config'); found {} without it (not "
    "shown: it is not a config). Extend only ootest configs"
)
#: (extends:, the problem's message; {w} is the config's folder, {o} the one beside it)
REFUSED = [
    ("/etc/passwd", NOT_YAML.format("/etc/passwd")),
    ("/etc/shadow", NOT_YAML.format("/etc/shadow")),
    ("/proc/self/environ", NOT_YAML.format(Path("/proc/self/environ").resolve())),
    ("/dev/zero", NOT_YAML.format("/dev/zero")),
    (".env", NOT_YAML.format("{w}/.env")),
    ("passwd.yaml", NOT_YAML.format("/etc/passwd")),  # a symlink: where it points counts
    ("../outside/base.yaml", OUTSIDE.format("{o}/base.yaml")),
    ("../outside/secrets.yaml", OUTSIDE.format("{o}/secrets.yaml")),
    ("{o}/base.yaml", OUTSIDE.format("{o}/base.yaml")),
    ("sub/../../outside/base.yaml", OUTSIDE.format("{o}/base.yaml")),
    ("link.yaml", OUTSIDE.format("{o}/base.yaml")),
    ("secrets.yaml", "{w}/secrets.yaml:1:1: " + NOT_CONFIG.format("a mapping of 2 keys")),
    (
        "token.yaml",
        "{w}/token.yaml:1:1: expected a mapping with key 'test_suite_config'; "
        "found text of 39 characters (not shown: it is not a config)",
    ),
    (
        "list.yaml",
        "{w}/list.yaml:1:1: expected a mapping with key 'test_suite_config'; found a list",
    ),
    (
        "number.yaml",
        "{w}/number.yaml:1:1: expected a mapping with key 'test_suite_config'; "
        "found a single value",
    ),
    ("fifo.yaml", "expected an existing config file; found no file at {w}/fifo.yaml"),
    ("dir.yaml", "expected an existing config file; found no file at {w}/dir.yaml"),
    # not expanded: a path under the config's folder, which does not exist
    (
        "~/.ssh/config.yaml",
        "expected an existing config file; found no file at {w}/~/.ssh/config.yaml",
    ),
    (
        "${HOME}/.config/x.yaml",
        "expected an existing config file; found no file at {w}/${HOME}/.config/x.yaml",
    ),
]


def test_extends_reads_nothing_outside_the_roots_and_quotes_no_file(
    tree: dict[str, Path],
) -> None:
    work, outside = tree["work"], tree["outside"]
    env = _env(tree)
    start = time.monotonic()
    for ext, want in REFUSED:
        cfg = work / "c.yaml"
        cfg.write_text(f"test_suite_config:\n  extends: '{ext.replace('{o}', str(outside))}'\n")
        got = _problems(cfg, env)
        text = want.replace("{w}", str(work)).replace("{o}", str(outside))
        if not text.startswith(str(work) + "/") or "c.yaml" in text:
            text = f"{cfg}:2:12: test_suite_config.extends[0]: {text}"
        assert got == [text], ext
        assert SECRET not in "\n".join(got)
    took = time.monotonic() - start
    print(f"extends: {len(REFUSED)} hostile targets refused in {took:.2f} s")
    assert took < 20


def test_extends_follows_the_roots_and_the_allow_list(tree: dict[str, Path]) -> None:
    work = tree["work"]
    allowed = {
        "sub/base.yaml": {},
        "${TORCH_ROOT}": {},
        "${TORCH_DEVICE_ROOT}": {},
        "${allowed}": {"OOTEST_EXTENDS_PATH": f"/nowhere{os.pathsep}{tree['allowed']}"},
    }
    for ext, more in allowed.items():
        for name, path in tree.items():
            ext = ext.replace("${" + name + "}", f"{path}/base.yaml")
        cfg = work / "c.yaml"
        cfg.write_text(f"test_suite_config:\n  extends: '{ext}'\n")
        assert load_config(cfg, env=_env(tree, **more), check_paths=False).suite.labels == [
            "base"
        ], ext
    # without the allow-list entry, the same file is refused
    cfg.write_text(f"test_suite_config:\n  extends: '{tree['allowed']}/base.yaml'\n")
    assert _problems(cfg, _env(tree)) == [
        f"{cfg}:2:12: test_suite_config.extends[0]: "
        + OUTSIDE.format(f"{tree['allowed']}/base.yaml")
    ]


def test_config_validate_never_prints_an_extended_file(tree: dict[str, Path]) -> None:
    work = tree["work"]
    for ext in ("/etc/passwd", ".env", "secrets.yaml", "token.yaml"):
        cfg = work / "c.yaml"
        cfg.write_text(f"test_suite_config:\n  extends: '{ext}'\n")
        r = ootest("config", "validate", "--no-paths", str(cfg), env=_env(tree))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert SECRET not in r.stdout + r.stderr and "root:x:0:0" not in r.stderr


def test_an_emu_profile_that_is_not_one_is_not_quoted(tmp_path: Path) -> None:
    """``device: emu:<path>`` names a profile file a pull request may ship: one that
    extends a symlink to any file gets an error that quotes none of it."""
    from ootest.device.emu import DeviceError, read_profile

    (tmp_path / "secret.yaml").write_text(f"TOKEN={SECRET}\n" * 50)
    (tmp_path / "p.yaml").write_text("extends: secret.yaml\n")
    with pytest.raises(DeviceError) as e:
        read_profile(str(tmp_path / "p.yaml"))
    assert str(e.value) == (
        f"{tmp_path}/secret.yaml:1:1: expected a mapping (description, extends, dtypes, ops, "
        "op_dtypes, faults), found text of 1,299 characters (not shown: it is not a profile)"
    )
