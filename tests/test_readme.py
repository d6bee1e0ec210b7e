"""Every command README.md shows is run (issue 50), so the front page cannot drift from the CLI: the cheap
ones (offline, seconds, writing nothing) for real, the rest with `--help` on the command they call.

A command is a line of a ```bash block (continuation lines joined, comments dropped; `a && b` is two).
`.venv/bin/X` is X of the environment running the tests. `REAL` lists, by prefix, the commands run for
real; every other command must answer `--help` with its usage. A new README command is checked the
moment it is written: for real if it is added to `REAL`, else through its `--help`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BIN = Path(sys.executable).parent

# Run for real: each is offline, takes seconds and writes nothing (pats sweep --dry-run lists the cells).
REAL = (
    "pats validate ",
    "pats show ",
    "pats data list",
    "pats plan ",
    "pats reviser bench --rules",
)


def commands(text: str) -> list[str]:
    """The commands of the ```bash blocks of a markdown text."""
    out: list[str] = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = " ".join(re.sub(r"\s+#.*", "", line).split())
            out += [part.strip() for part in line.split("&&") if part.strip() and not line.startswith("#")]
    return out


def argv(command: str) -> list[str]:
    """The command as the test runs it: `.venv/bin/X` and bare `pats` from this environment."""
    words = shlex.split(command)
    head = words[0].removeprefix(".venv/bin/")
    if head in ("pats", "python", "pip"):
        words[0] = str(BIN / head) if head != "python" else sys.executable
    return words


def is_real(command: str) -> bool:
    plain = command.removeprefix(".venv/bin/")
    return plain.startswith(REAL) or (plain.startswith("pats sweep ") and "--dry-run" in plain.split())


def help_argv(command: str) -> list[str]:
    """The program and subcommands of `command` (the words before its first argument), with --help."""
    words = argv(command)
    if Path(words[0]).name.startswith("python") and words[1:2] == ["-m"]:
        return [*words[:3], "--help"]
    called = [words[0]]
    for word in words[1:]:
        if not re.fullmatch(r"[a-z][a-z-]*", word):
            break
        called.append(word)
    return [*called, "--help"]


def run(args: list[str], glob: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd: list[str] | str = args
    if glob:  # the shell expands experiments/*.yaml as it does for the reader
        cmd = " ".join(shlex.quote(a) if "*" not in a else a for a in args)
    return subprocess.run(cmd, cwd=REPO, env=env, shell=glob, capture_output=True, text=True, timeout=300)


def test_the_readme_shows_the_set_up_commands_ci_runs():
    """The set-up commands (both test tiers and the main job), as .ci/run and a fresh clone use them."""
    shown = commands(README.read_text())
    assert "./scripts/install .venv --test" in shown and ".venv/bin/python -m pytest -n 2" in shown
    assert "./scripts/install .venv --test --vllm" in shown
    assert ".venv/bin/python -m pytest --run-slow -m slow" in shown
    assert "./scripts/install .venv" in shown and ".venv/bin/pats run experiments/quickstart.yaml" in shown
    ci = (REPO / ".ci" / "run").read_text()
    assert "./scripts/install .venv --test --vllm" in ci and "python -m pytest" in ci
    assert "tier default -n 2\n" in ci and "tier slow --run-slow" in ci


@pytest.mark.parametrize("command", [c for c in commands(README.read_text()) if is_real(c)])
def test_a_cheap_readme_command_runs(command):
    done = run(argv(command), glob="*" in command)
    assert done.returncode == 0, (
        f"`{command}` exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    )


@pytest.mark.parametrize("command", [c for c in commands(README.read_text()) if not is_real(c)])
def test_every_other_readme_command_answers_help(command):
    args = help_argv(command)
    done = run(args)
    assert done.returncode == 0 and "usage" in (done.stdout + done.stderr).lower(), (
        f"`{' '.join(args)}` (for the README's `{command}`) exited {done.returncode}:\n"
        f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
    )


def test_commands_are_found_in_the_blocks_and_classified():
    """The extraction can fail: continuation lines, comments, `&&` and non-bash blocks."""
    text = (
        "```bash\npats run a.yaml \\\n    x=1   # a comment\n# only a comment\n"
        "./scripts/install .venv && .venv/bin/pats show a.yaml\n```\n"
        "```yaml\nname: not a command\n```\n"
    )
    assert commands(text) == ["pats run a.yaml x=1", "./scripts/install .venv", ".venv/bin/pats show a.yaml"]
    assert help_argv("pats reviser bench --model m")[1:] == ["reviser", "bench", "--help"]
    assert help_argv("pats export verl experiments/a.yaml out/")[1:] == ["export", "verl", "--help"]
    assert help_argv(".venv/bin/python -m pytest")[1:] == ["-m", "pytest", "--help"]
    assert is_real("pats sweep a.yaml --dry-run") and not is_real("pats sweep a.yaml")
    assert is_real(".venv/bin/pats show a.yaml") and not is_real("pats run a.yaml")


def test_the_results_stand_in_five_lines_that_link_docs_results():
    """The README's Results section: at most five lines, linking the page that holds the rows."""
    section = README.read_text().split("\n## Results\n", 1)[1].split("\n## ", 1)[0].strip()
    assert len(section.splitlines()) <= 5, section
    assert "(docs/results.md)" in section
