"""Activation of backends as they ship (Note [Backends as they ship]).

Each fake backend is a distribution of its own (tests/device/fake_backend.py).
Subprocess tier: the probe child (``python -m ootest.plugin.probe``) loads the
device as the plugin does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.device.fake_backend import BACKEND, fake_backend

ROOT = Path(__file__).resolve().parents[2]


def _probe(device: str, *sites: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([*(str(s) for s in sites), str(ROOT / "src")])
    e = {**os.environ, "PYTHONPATH": path, **env}
    if "TORCH_DEVICE_BACKEND_AUTOLOAD" not in env:
        e.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    r = subprocess.run(
        [sys.executable, "-m", "ootest.plugin.probe", device],
        capture_output=True,
        text=True,
        env=e,
        timeout=300,
    )
    # the probe's stage lines are for the parent's deadline (Note [The probe's
    # deadline]); what it says to a person is the rest
    said = [x for x in r.stderr.splitlines(keepends=True) if not x.startswith("ootest-probe: ")]
    r.stderr = "".join(said)
    return r


def _loaded(r: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert r.returncode == 0, r.stderr[-2000:]
    data: dict[str, object] = json.loads(r.stdout)
    return data


def test_module_form_of_an_autoloaded_backend(tmp_path: Path) -> None:
    """The documented form, for a package torch autoloads: it was imported before
    torch and the autoload re-entered it ('Failed to load the backend extension')."""
    site = fake_backend(tmp_path, "fakebk", "fake")
    assert _loaded(_probe("fakebk:fake", site))["name"] == "fake"


def test_name_form_of_an_autoloaded_backend(tmp_path: Path) -> None:
    site = fake_backend(tmp_path, "fakebk", "fake")
    assert _loaded(_probe("fake", site))["name"] == "fake"


def test_module_form_of_a_backend_registered_on_import(tmp_path: Path) -> None:
    """No entry point: importing the module registers it (as torch_spyre does)."""
    site = fake_backend(tmp_path, "plainbk", "plain", entry=False, tail="_autoload()")
    assert _loaded(_probe("plainbk:plain", site))["name"] == "plain"


def test_name_form_without_the_backend(tmp_path: Path) -> None:
    site = fake_backend(tmp_path, "fakebk", "fake")
    r = _probe("other", site)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "--ootest-device other: the privateuse1 backend is registered as 'fake' (torch "
        "autoloaded fake), expected 'other'; use 'fake'"
    )


def test_name_form_with_autoload_off(tmp_path: Path) -> None:
    site = fake_backend(tmp_path, "fakebk", "fake")
    r = _probe("fake", site, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "--ootest-device fake: no backend named 'fake' is registered after 'import torch' "
        "(autoload is off: unset TORCH_DEVICE_BACKEND_AUTOLOAD); torch autoloads these entry "
        "points: fake. Name the module that registers it: --device <module>:fake"
    )


_ABI = """
raise ImportError(
    "/site/libfake.so: undefined symbol: _ZN3c104impl3cow15materialize_cowERKNS_7StorageE"
)
"""


@pytest.mark.parametrize("device", ["fake", "fakebk:fake"])
def test_built_for_another_torch_is_one_line(tmp_path: Path, device: str) -> None:
    site = fake_backend(tmp_path, "fakebk", "fake", body=_ABI)
    r = _probe(device, site)
    assert r.returncode == 2, r.stderr
    import importlib.metadata

    torch = importlib.metadata.version("torch")
    assert r.stderr.strip() == (
        f"--ootest-device {device}: 'fakebk' was built for another torch than the installed "
        f"{torch} (undefined symbol _ZN3c104impl3cow15materialize_cowERKNS_7StorageE); install "
        f"a build of fakebk for torch {torch}, or install the torch it was built for"
    )
    assert "Traceback" not in r.stderr


def test_a_backend_raising_while_loading_is_one_line(tmp_path: Path) -> None:
    body = BACKEND.format(name="fake", available=True, tail="") + (
        "\n\ndef _autoload():\n    raise RuntimeError('fake: no driver found (libfake.so)')\n"
    )
    site = fake_backend(tmp_path, "fakebk", "fake", body=body)
    r = _probe("fakebk:fake", site)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("--ootest-device fakebk:fake: loading the backend 'fakebk' with ")
    assert lines[0].endswith(
        "failed: RuntimeError: fake: no driver found (libfake.so); fix the backend's "
        "installation (its own import fails the same way)"
    )


def test_no_device_present(tmp_path: Path) -> None:
    site = fake_backend(tmp_path, "fakebk", "fake", available=False)
    r = _probe("fake", site)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "--ootest-device fake: device 'fake' is registered but torch.fake.is_available() is "
        "not true; check that the hardware or driver is present"
    )


def test_emu_children_keep_an_autoloaded_backend_out(tmp_path: Path) -> None:
    """With a backend torch autoloads installed, emu still loads: the process that
    loads it turns autoload off before torch is imported, and says so once."""
    site = fake_backend(tmp_path, "fakebk", "fake")
    data = _loaded(_probe("emu:young", site))
    assert data["name"] == "emu"
    r = _probe("emu:young", site)
    assert r.stderr.count("TORCH_DEVICE_BACKEND_AUTOLOAD=0") == 1, r.stderr


def test_a_command_says_it_once_for_its_children(tmp_path: Path) -> None:
    """`ootest run` on emu with an autoloaded backend installed: the run passes,
    and the note appears once, not once per child."""
    site = fake_backend(tmp_path, "fakebk", "fake")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_t.py").write_text(
        "import torch\nfrom torch.testing._internal.common_device_type import "
        "instantiate_device_type_tests\nfrom torch.testing._internal.common_utils import "
        "TestCase, run_tests\n\n\nclass TestT(TestCase):\n    def test_add(self, device):\n"
        "        x = torch.ones(3, device=device)\n        self.assertEqual((x + x).cpu(), "
        "torch.full((3,), 2.0))\n\n\ninstantiate_device_type_tests(TestT, globals())\n"
    )
    (suite / "cfg.yaml").write_text(
        "test_suite_config:\n  device: emu:young\n  files:\n    - path: ./test_t.py\n"
        "      unlisted_test_mode: mandatory_success\n"
    )
    path = os.pathsep.join([str(site), str(ROOT / "src")])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    r = subprocess.run(
        [sys.executable, "-m", "ootest.cli", "run", "cfg.yaml", "--results", "r.jsonl", "-q"],
        cwd=suite,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert out.count("TORCH_DEVICE_BACKEND_AUTOLOAD=0") == 1, out[-3000:]
