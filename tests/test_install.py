"""The install every doc and message gives resolves to this project: the package named `pats` on PyPI is
an unrelated one, so no file may tell a user to install pats with extras by that name; the way pats is
installed instead (from a clone, with its extras) builds a package that is ours."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import pats

REPO = Path(__file__).resolve().parents[1]
# `pip install` then, among its arguments, the bare name with extras: pats[...], 'pats[...]', "pats[...]".
# A path or a dot before the brackets (`-e '.[verl]'`, `"./pats[verl]"`, `'/path/to/pats[verl]'`) is a
# clone, and fine.
BARE_NAME = re.compile(r"pip3? install\b[^\n`]*?(?:^|[\s=\"'])" + "pats" + r"\[", re.MULTILINE)
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "runs", "wandb", "__pycache__", ".pytest_cache"}


def repository_files() -> list[Path]:
    """The tracked files of the checkout, or every file under it outside build and run folders."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True)
    if listed.returncode == 0 and listed.stdout:
        return [REPO / name for name in listed.stdout.decode().split("\0") if name]
    return [
        path
        for path in REPO.rglob("*")
        if path.is_file() and not SKIP_DIRS.intersection(path.relative_to(REPO).parts)
    ]


def test_the_pattern_catches_the_bare_name_and_lets_a_clone_pass():
    for bad in ('pip install "pats[verl]"', "pip install pats[verl]", "`pip install -q 'pats[llm]'`"):
        assert BARE_NAME.search(bad), bad
    for good in (
        "pip install -e '.[verl]'",
        'pip install "./pats[verl]"',
        "pip install -e '/path/to/pats[verl,search]'",
        '"pats[alfworld,llm,search]",  # in pyproject: the project naming its own extras',
    ):
        assert not BARE_NAME.search(good), good


def test_no_file_tells_a_user_to_install_the_other_pats():
    found = []
    for path in repository_files():
        if path == Path(__file__).resolve():
            continue  # the pattern's own examples above
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files
        for match in BARE_NAME.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(REPO)}:{line}: {match.group(0)}")
    assert found == [], "install pats from a clone (`pip install -e '.[EXTRA]'`), not by its PyPI name:\n" + (
        "\n".join(found)
    )


@pytest.mark.slow
def test_a_clone_builds_and_installs_our_package(tmp_path):
    """A wheel of a fresh copy of the tracked files, installed without its dependencies into a new venv:
    its metadata and modules are this project's (the verl extra, the preflight), not the other pats, and
    its own prompt files (judges/, the shipped reviser bundles) come with it and load from the install."""
    clone = tmp_path / "clone"
    for path in repository_files():
        target = clone / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(clone)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("pats-*.whl")
    assert wheel.name == f"pats-{pats.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "pats/backends/verl/preflight.py" in names and "pats/backends/verl/loop.py" in names
    # `pats reviser bench` and `pats compile-reviser` read the shipped bundles by default: package data
    shipped = sorted(p.name for p in (REPO / "pats" / "reviser" / "shipped_bundles").glob("*.json"))
    packaged = sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("pats/reviser/shipped_bundles/"))
    assert len(shipped) == 34 and packaged == shipped, "pyproject's package-data ships the reviser bundles"
    # the rubrics and the reviser prompt, edited in the checkout's judges/, are copied in by setup.py
    judges = sorted(p.name for p in (REPO / "judges").glob("*.yaml"))
    packaged = sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("pats/judges_data/"))
    assert "reviser.yaml" in judges and packaged == judges, "setup.py's build step ships judges/ in the wheel"
    metadata = zipfile.ZipFile(wheel).read(f"pats-{pats.__version__}.dist-info/METADATA").decode()
    assert 'Requires-Dist: verl==0.9.1; extra == "verl"' in metadata

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    probe = (
        "import importlib.metadata as m, pathlib, pats; print(pats.__file__); print(m.version('pats')); "
        "print(pathlib.Path(pats.__file__).parent / 'backends/verl/preflight.py')"
    )
    # -I: neither PYTHONPATH nor the working directory, so only the venv's own packages import.
    shown = subprocess.run([str(python), "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    where, version, preflight = shown.stdout.split()
    assert where.startswith(str(venv)) and Path(preflight).is_file()
    assert version == pats.__version__

    # From the installed wheel, pats' own reviser prompt and each environment's rubric load (no LLM call).
    # The venv has no dependencies of its own: this environment's site-packages go on its path, after the
    # venv's own (a plain .pth line, so the editable install's finder there is not run).
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site / "dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    probe = (
        "import pats.envs\n"
        "from pats.judges import load_rubric\n"
        "from pats.lm.prompts import own_prompt\n"
        "from pats.registry import ENVIRONMENTS\n"
        "from pats.reviser.prompt import load_reviser_prompt\n"
        "assert load_reviser_prompt().modes\n"
        "print(own_prompt('reviser.yaml'))\n"
        "for kind in ENVIRONMENTS.names():\n"
        "    assert load_rubric(None, kind).environment == kind\n"
        "    print(own_prompt(f'{kind}.yaml'))\n"
    )
    shown = subprocess.run([str(python), "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    loaded = shown.stdout.split()
    assert all(path.startswith(str(site / "pats" / "judges_data")) for path in loaded), loaded
    assert sorted(Path(path).name for path in loaded) == judges
