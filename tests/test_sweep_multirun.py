"""Grids on `pats sweep`'s command line as Hydra's --multirun writes them (issue 49, item 5): KEY=a,b,c,
KEY=range(0,4), seed=..., lists in brackets and quoted values staying one value, validated like a sweep
file's grid (every cell loaded before anything runs)."""

from __future__ import annotations

import pytest

from pats.cli.main import main
from pats.errors import SpecError
from pats.sweep.multirun import split_multirun


def test_values_ranges_lists_quotes_and_seeds():
    got = split_multirun(["trainer.lr=1e-4,3e-4", "trainer.steps=range(8,33,8)", "scaffold.cards=[outcome,failure]",
                          "judge.rubric='a,b'", "eval.every=4", "seed=range(0,3)"])  # fmt: skip
    assert got.grid == {"trainer.lr": ("1e-4", "3e-4"), "trainer.steps": ("8", "16", "24", "32")}
    assert got.overrides == ("scaffold.cards=[outcome,failure]", "judge.rubric='a,b'", "eval.every=4")
    assert got.seeds == (0, 1, 2)
    assert split_multirun(["seed=4"]).seeds == (4,) and split_multirun(["x=1"]).seeds is None
    grid = split_multirun(["scaffold.cards=[outcome],[outcome,failure]"]).grid
    assert grid == {"scaffold.cards": ("[outcome]", "[outcome,failure]")}  # two lists


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("trainer.lr=1e-4,,3e-4", "an empty value between commas"),
        ("trainer.lr=1e-4,1e-4", "repeats a value"),
        ("trainer.steps=range(4,2)", "range(4,2) is empty"),
        ("trainer.lr=range(0.1,1)", "range(start, stop)"),
        ("seed=a,b", "seeds are whole numbers"),
    ],
)
def test_malformed_sweeps_say_what_to_write(item, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        split_multirun([item])
    assert f"override '{item}'" in str(err.value)


def test_a_command_line_grid_gives_its_conditions(repo, capsys):
    quickstart = str(repo / "experiments/quickstart.yaml")
    assert main(["sweep", quickstart, "trainer.lr=1e-4,3e-4", "seed=range(0,2)", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("sweep sweep-") and out[0].endswith(": 4 cells")
    assert [line.split(":")[0].strip() for line in out[1:]] == [
        "quickstart-lr1e-4-s0", "quickstart-lr1e-4-s1", "quickstart-lr3e-4-s0", "quickstart-lr3e-4-s1"
    ]  # fmt: skip
    assert "trainer.lr=3e-4 seed=1" in out[4]


def test_a_command_line_grid_is_validated_like_a_sweep_files(repo, capsys):
    quickstart = str(repo / "experiments/quickstart.yaml")
    assert main(["sweep", quickstart, "trainer.lr=1e-4,fast", "logging.root=a,b", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "logging.root: is set per cell by the sweep; use --root" in err
    assert "trainer.lr" in err and "'trainer.lr=fast'" in err
    assert main(["sweep", quickstart, "seed=0,1", "--seeds", "0-1", "--dry-run"]) == 2
    assert "give the seeds once" in capsys.readouterr().err


def test_the_command_line_replaces_a_sweep_files_grid_key(repo, tmp_path, capsys):
    sweep_file = tmp_path / "lr.yaml"
    sweep_file.write_text(
        f"sweep:\n  specs: [{repo}/experiments/quickstart.yaml]\n  grid: {{trainer.lr: ['1e-4', '3e-4']}}\n"
    )
    assert main(["sweep", str(sweep_file), "trainer.lr=1e-3,3e-3", "--dry-run"]) == 0
    assert "quickstart-lr1e-3-s0:" in capsys.readouterr().out
    assert main(["sweep", str(sweep_file), "trainer.lr=1e-3", "--dry-run"]) == 0  # one value: no grid key
    out = capsys.readouterr().out
    assert out.startswith("sweep lr: 1 cell\n") and "quickstart-s0:" in out and "trainer.lr=1e-3" in out


def test_pats_validate_reads_a_sweeps_command_line_as_pats_sweep_does(repo, tmp_path, capsys):
    """`pats validate SWEEP KEY=a,b` plans the grid (it read 'a,b' as one value and failed), and a bad
    override is said once, not once per cell."""
    sweep_file = tmp_path / "two.yaml"
    sweep_file.write_text(f"sweep:\n  specs: [{repo}/experiments/quickstart.yaml]\n  seeds: [0, 1]\n")
    assert main(["validate", str(sweep_file), "trainer.lr=1e-4,3e-4"]) == 0
    assert "(sweep: 4 cells, 2 conditions)" in capsys.readouterr().out
    assert main(["validate", str(sweep_file), "trainer.lr=fast"]) == 2
    err = capsys.readouterr().err
    assert "1 problem in the spec" in err and err.count("'fast' is not a number") == 1
