"""pats.cli.main's own part of every command: items written after an option are more items, an unknown
option is refused, and a SpecNotice is printed as a note (the commands' own tests are elsewhere)."""

from __future__ import annotations

import warnings

import pytest

from pats.cli.main import main
from pats.errors import SpecNotice


@pytest.fixture
def sweep_file(repo, tmp_path):
    path = tmp_path / "lr.yaml"
    path.write_text(
        f"sweep:\n  specs: [{repo}/experiments/quickstart.yaml]\n  grid: {{trainer.lr: ['1e-4', '3e-4']}}\n"
    )
    return path


def test_items_after_an_option_are_more_items_and_an_unknown_option_is_refused(sweep_file, capsys):
    assert main(["sweep", str(sweep_file), "--dry-run", "trainer.lr=1e-3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sweep lr: 1 cell\n") and "trainer.lr=1e-3" in out
    for rest in (["--bogus"], ["trainer.lr=1e-3", "-z"]):
        with pytest.raises(SystemExit) as info:
            main(["sweep", str(sweep_file), "--dry-run", *rest])
        assert info.value.code == 2
        assert (
            capsys.readouterr().err.splitlines()[-1]
            == f"pats: error: unrecognized arguments: {' '.join(rest)}"
        )


def test_a_notice_is_formatted_as_a_note_once_a_command_ran(sweep_file, capsys):
    """Python prints a warning with warnings.formatwarning: after main, a SpecNotice is 'note: ...' and
    any other warning keeps Python's format (pytest records warnings instead of printing them, so the
    formatter is asked directly)."""
    assert main(["sweep", str(sweep_file), "--dry-run"]) == 0
    assert warnings.formatwarning("the key's variable is not set", SpecNotice, "x.py", 3) == (
        "note: the key's variable is not set\n"
    )
    assert warnings.formatwarning("plain", UserWarning, "x.py", 3, "") == "x.py:3: UserWarning: plain\n"


def test_a_pats_error_is_one_line_on_stderr_and_its_exit_code(capsys):
    assert main(["sweep", "status", "a", "b"]) == 2
    assert capsys.readouterr() == (
        "",
        "error: give one sweep folder: pats sweep status runs/sweeps/NAME\n",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--parallel", "0", "QUICKSTART"],
            "--parallel 0: give the number of cells to run at once, 1 or more",
        ),
        (["--parallel", "2", "--cpus", "2", "QUICKSTART"], "--parallel N runs on a local Ray and shares"),
        (["SWEEP", "SWEEP"], "give one sweep file, not 2"),
        (
            ["trainer.lr=1e-3"],
            "no spec file given; e.g. `pats sweep experiments/quickstart.yaml --seeds 0-1`",
        ),
        (["QUICKSTART", "--seeds", "0-1", "seed=2"], "give the seeds once: --seeds or seed=..., not both"),
    ],
    ids=["parallel-0", "parallel-with-cpus", "two-sweep-files", "no-spec", "seeds-twice"],
)
def test_a_sweeps_arguments_that_cannot_run_are_a_usage_error_not_a_spec_problem(
    args, message, repo, sweep_file, capsys
):
    """No spec is at fault when the command line itself cannot run: the error is the message alone
    (it read "1 problem in the spec / <top level>: ..." before), with a spec problem's exit code."""
    given = {"QUICKSTART": str(repo / "experiments/quickstart.yaml"), "SWEEP": str(sweep_file)}
    assert main(["sweep", *(given.get(a, a) for a in args), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and "problem in the spec" not in err
