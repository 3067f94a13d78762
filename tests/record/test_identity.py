"""File keys and node IDs (Note [File keys], Note [Node IDs]): pure, no torch."""

from __future__ import annotations

from pathlib import Path

from ootest.record.identity import FileKeys, env_roots, node_id, template_roots


def _tree(tmp: Path, *files: str) -> None:
    for f in files:
        (tmp / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp / f).write_text("")


def test_key_is_relative_to_the_deepest_root(tmp_path: Path) -> None:
    _tree(tmp_path, "repo/third_party/pytorch/test/test_x.py", "repo/tests/test_y.py")
    (tmp_path / "repo" / ".git").mkdir()
    keys = FileKeys([tmp_path / "repo" / "third_party" / "pytorch"])
    assert keys.key(tmp_path / "repo/third_party/pytorch/test/test_x.py") == "test/test_x.py"
    # the backend's own file: its git checkout is the root
    assert keys.key(tmp_path / "repo/tests/test_y.py") == "tests/test_y.py"


def test_same_key_from_any_location_and_spelling(tmp_path: Path) -> None:
    _tree(tmp_path, "a/pytorch/test/test_x.py", "b/c/pytorch/test/test_x.py")
    one = FileKeys([tmp_path / "a" / "pytorch"]).key(tmp_path / "a/pytorch/test/test_x.py")
    two = FileKeys([tmp_path / "b/c/pytorch"]).key(tmp_path / "b/c/pytorch/test/../test/test_x.py")
    assert one == two == "test/test_x.py"
    (tmp_path / "link").symlink_to(tmp_path / "a" / "pytorch")
    assert FileKeys([tmp_path / "link"]).key(tmp_path / "a/pytorch/test/test_x.py") == one


def test_fallbacks_never_give_absolute_or_dotdot_paths(tmp_path: Path) -> None:
    _tree(tmp_path, "cfgdir/suite/test_s.py", "loose/test_l.py")
    keys = FileKeys([], fallback=str(tmp_path / "cfgdir"))
    assert keys.key(tmp_path / "cfgdir/suite/test_s.py") == "suite/test_s.py"
    assert keys.key(tmp_path / "loose/test_l.py") == "loose/test_l.py"


def test_roots_from_the_environment_and_config_templates(tmp_path: Path) -> None:
    env = {"PYTORCH_ROOT": "/x/pytorch", "TORCH_DEVICE_ROOT": "/y/backend", "MINE": "/z"}
    assert env_roots(env) == ["/x/pytorch", "/y/backend"]
    templates = ["${MINE}/tests/*.py", "${NOPE}/a.py", "rel/b.py", "/abs/${MINE}/c.py"]
    assert template_roots(templates, env) == ["/z"]


def test_node_ids_pytest_takes_back(tmp_path: Path) -> None:
    _tree(tmp_path, "root/tests/test_a.py", "elsewhere/test/test_b.py")
    root, inv = str(tmp_path / "root"), str(tmp_path / "root")
    a = str(tmp_path / "root/tests/test_a.py")
    b = str(tmp_path / "elsewhere/test/test_b.py")
    # under the rootdir: pytest's own
    assert node_id("tests/test_a.py::T::t", "tests/test_a.py", a, root, inv) == (
        "tests/test_a.py::T::t"
    )
    # outside it, named by nothing: the file as an argument from the invocation folder
    assert node_id("::T::t", "", b, root, inv) == f"{b}::T::t"
    assert node_id("::T::t", "", b, root, str(tmp_path)) == "elsewhere/test/test_b.py::T::t"
