"""scripts/install-torch puts torch's CPU build in the venv: from a wheelhouse pip already reaches with no
index, else from PyTorch's CPU index (PATS_TORCH_INDEX), preferring its 2.13.0+cpu over PyPI's 2.13.0
(the Linux CUDA build, 5 GB more); where only PyPI's build comes, it says so and how to mend it.

Real pip, run by the script in a fresh venv, against stand-in wheels (a `torch` of a few bytes with the
real version tags) in local indexes: the choice is pip's and the script's, not a download of torch."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "install-torch"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the CPU/CUDA split it tests is Linux's")


def stand_in_wheel(folder: Path, version: str) -> Path:
    """A wheel named and tagged like torch at `version` whose module says which one it is."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch/__init__.py", f"__version__ = {version!r}\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return wheel


def simple_index(root: Path, *wheels: Path) -> str:
    """A PEP 503 index at `root` listing `wheels` under the project torch; its file: URL."""
    page = root / "torch"
    page.mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in wheels)
    (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root.as_uri() + "/"


def venv_with_pip(path: Path) -> Path:
    """A venv whose `python -m pip` is this interpreter's pip (linked in, nothing else of this
    environment visible: its own torch would read as already installed)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    shared = path / "pip-only"
    shared.mkdir()
    (shared / "pip").symlink_to(Path(sysconfig.get_paths()["purelib"]) / "pip")
    site = next(path.glob("lib/python*/site-packages"))
    (site / "pip-only.pth").write_text(str(shared) + "\n")
    return path


def install(
    venv: Path,
    tmp_path: Path,
    *,
    find_links: Path | None,
    torch_index: str,
    pip_options: tuple[str, ...] = (),
) -> tuple[str, str]:
    """Run the script with pip cut off from this machine's config: 'PyPI' is a local index holding only
    the plain 2.13.0. Returns (the installed torch's version, the script's stderr)."""
    pypi = simple_index(tmp_path / "pypi", stand_in_wheel(tmp_path / "pypi-files", "2.13.0"))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": pypi,
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PATS_TORCH_INDEX": torch_index,
    }
    if find_links is not None:
        env["PIP_FIND_LINKS"] = str(find_links)
    done = subprocess.run([str(SCRIPT), str(venv), *pip_options], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(  # writing no bytecode: a test reads whether pip wrote any
        [str(venv / "bin" / "python"), "-B", "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return shown.stdout.strip(), done.stderr


def test_a_wheelhouse_pip_reaches_without_an_index_gives_the_cpu_build(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    stand_in_wheel(wheelhouse, "2.13.0+cpu")
    # The CPU index named is not there: it must not be needed.
    version, stderr = install(
        venv_with_pip(tmp_path / "venv"),
        tmp_path,
        find_links=wheelhouse,
        torch_index=(tmp_path / "none").as_uri(),
    )
    assert version == "2.13.0+cpu"
    assert "CUDA" not in stderr


def test_the_cpu_index_wins_over_pypis_build(tmp_path):
    cpu_index = simple_index(tmp_path / "cpu", stand_in_wheel(tmp_path / "cpu-files", "2.13.0+cpu"))
    version, stderr = install(
        venv_with_pip(tmp_path / "venv"), tmp_path, find_links=None, torch_index=cpu_index
    )
    assert version == "2.13.0+cpu"
    assert "CUDA" not in stderr


def test_only_pypis_build_says_so_and_how_to_get_the_cpu_one(tmp_path):
    empty = simple_index(tmp_path / "empty")
    version, stderr = install(venv_with_pip(tmp_path / "venv"), tmp_path, find_links=None, torch_index=empty)
    assert version == "2.13.0"
    assert "torch 2.13.0 is PyPI's CUDA build" in stderr
    assert f"since {empty} gave no CPU build" in stderr
    assert "set PATS_TORCH_INDEX" in stderr and "torch==2.13.0+cpu" in stderr


@pytest.mark.parametrize("pip_options", [(), ("--no-compile",)], ids=["compiled", "not-compiled"])
def test_pip_options_after_the_venv_reach_pip(tmp_path, pip_options):
    """scripts/install passes --no-compile (it compiles the whole venv at the end, on every core): pip
    then writes no bytecode for torch; without it pip compiles as always."""
    wheelhouse = tmp_path / "wheelhouse"
    stand_in_wheel(wheelhouse, "2.13.0+cpu")
    venv = venv_with_pip(tmp_path / "venv")
    install(
        venv,
        tmp_path,
        find_links=wheelhouse,
        torch_index=(tmp_path / "none").as_uri(),
        pip_options=pip_options,
    )
    compiled = list(next(venv.glob("lib/python*/site-packages")).glob("torch/__pycache__/__init__.*.pyc"))
    assert bool(compiled) == (pip_options == ())


def test_it_names_its_usage_without_a_venv(tmp_path):
    done = subprocess.run([str(SCRIPT), str(tmp_path / "missing")], capture_output=True, text=True)
    assert done.returncode == 2
    assert "usage: scripts/install-torch VENV" in done.stderr
