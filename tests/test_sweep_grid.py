"""pats.sweep.grid read whole, from the mutation run of grid.py (129 of 196 killed, issue 49 item 8): every
refusal's text as the user reads it (parse_seeds', a sweep file that is not a mapping, a sweep section
pydantic refuses, a `root:` that only made sense from the working directory, each key the sweep owns, two
specs of one name and a spec given twice, and the error's "pats sweep"), where `root:` must not be
refused, a condition's label sanitized, the derived name's 8 hex characters, `cells(threads=N)` only
where the spec leaves trainer.threads unset, a failing grid value that does not hide the next one's
problem, SweepSpec's defaults and a frozen Cell."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from pats.errors import SpecError, SpecIssue
from pats.sweep.grid import (
    SweepSpec,
    _label,
    _owned_issues,
    cells,
    is_sweep_file,
    load_sweep_file,
    parse_seeds,
    sweep_name,
    validated,
)

OWNED_TEXT = "is set per cell by the sweep; use "


def quickstart(repo: Path) -> str:
    return str(repo / "experiments/quickstart.yaml")


# parse_seeds ----------------------------------------------------------------------------------------


def test_a_one_seed_range_is_accepted_and_a_falling_one_refused_in_full():
    assert parse_seeds("3-3") == (3,)
    assert parse_seeds(" 2 - 4 ,7") == (2, 3, 4, 7)
    with pytest.raises(SpecError) as err:
        parse_seeds("3-1")
    assert err.value.issues == [
        SpecIssue("", "--seeds '3-1': write seeds as 0-3, 0,2,5 or 0-1,4 (ranges low-high)")
    ]
    assert str(err.value) == (
        "1 problem in the spec\n  <top level>: --seeds '3-1': write seeds as 0-3, 0,2,5 or 0-1,4 "
        "(ranges low-high)"
    )


# sweep files ------------------------------------------------------------------------------------------


def test_is_sweep_file_only_for_a_yaml_whose_one_key_is_sweep(tmp_path):
    assert is_sweep_file(tmp_path / "missing.yaml") is False
    broken = tmp_path / "broken.yaml"
    broken.write_text("sweep: [unclosed\n")
    assert is_sweep_file(broken) is False
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\n")
    assert is_sweep_file(spec) is False
    two = tmp_path / "two.yaml"
    two.write_text("sweep: {specs: [a.yaml]}\nname: x\n")
    assert is_sweep_file(two) is False
    one = tmp_path / "one.yaml"
    one.write_text("sweep: {specs: [a.yaml]}\n")
    assert is_sweep_file(one) is True


def test_a_sweep_section_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("sweep: [a.yaml, b.yaml]\n")
    with pytest.raises(SpecError) as err:
        load_sweep_file(path)
    assert err.value.file == str(path)
    assert err.value.issues == [
        SpecIssue("sweep", "must be a mapping of name, specs, seeds, overrides, grid, ...")
    ]


def test_a_sweep_file_without_specs_says_the_field_is_required(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("sweep: {seeds: [0]}\n")
    with pytest.raises(SpecError) as err:
        load_sweep_file(path)
    assert (err.value.file, err.value.issues) == (str(path), [SpecIssue("sweep.specs", "Field required")])


def test_pydantics_issues_name_the_sweep_key_they_are_about():
    section = {"specs": [1], "grid": {"k": 5}, "cpus": 0, "order": "x"}
    with pytest.raises(SpecError) as err:
        validated(section, "where.yaml")
    assert err.value.file == "where.yaml"
    # the keys are the sweep's; each message is pydantic's own (its words are matched loosely: they are
    # pydantic's to change between releases)
    assert [(i.path, i.source) for i in err.value.issues] == [
        ("sweep.specs.0", ""), ("sweep.specs", ""), ("sweep.grid.k", ""), ("sweep.order", ""), ("sweep.cpus", "")
    ]  # fmt: skip
    said = [i.message for i in err.value.issues]
    for message, words in zip(
        said, ("string", "at least 1", "tuple", "'spec' or 'seed'", "greater than 0"), strict=True
    ):
        assert words in message, said
    with pytest.raises(SpecError) as err:
        validated({"specs": []}, "pats sweep")
    (issue,) = err.value.issues
    assert issue.path == "sweep.specs" and "at least 1" in issue.message


def test_sweep_spec_defaults():
    sweep = SweepSpec(specs=("a.yaml",))
    assert (sweep.name, sweep.seeds, sweep.overrides, sweep.grid, sweep.root, sweep.order) == (
        "", (0,), (), {}, "runs/sweeps", "spec"
    )  # fmt: skip
    assert (sweep.cpus, sweep.gpus, sweep.memory) == (1.0, 0.0, 0.0)


# root: relative to the sweep file ----------------------------------------------------------------------


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A working directory `cwd/` and a sweep file's folder `conf/` beside it; returns (cwd, conf)."""
    base = tmp_path.resolve()
    cwd, conf = base / "cwd", base / "conf"
    cwd.mkdir()
    conf.mkdir()
    monkeypatch.chdir(cwd)
    return cwd, conf


def sweep_file(conf: Path, root: str) -> Path:
    path = conf / "s.yaml"
    path.write_text(f"sweep:\n  specs: [a.yaml]\n  root: {root}\n")
    return path


def refusal(root: str, mine: Path, before: Path, write: str) -> str:
    return (
        f"'{root}' is read relative to the sweep file (since issue 49; before, relative to the working "
        f"directory): it names {mine}, which does not exist, where before it named {before}; write root: "
        f"{write} for the latter, or create the former first"
    )


def test_a_root_whose_sweep_is_under_the_working_directory_is_refused(places):
    cwd, conf = places
    (cwd / "runs" / "s").mkdir(parents=True)  # the sweep (named after its file) was written from cwd
    path = sweep_file(conf, "runs")
    with pytest.raises(SpecError) as err:
        load_sweep_file(path)
    assert err.value.file == str(path)
    message = refusal("runs", conf / "runs", cwd / "runs", "../cwd/runs")
    assert err.value.issues == [SpecIssue("sweep.root", message)]
    assert str(err.value) == f"{path}: 1 problem in the spec\n  sweep.root: {message}"


def test_a_root_that_could_only_exist_from_the_working_directory_is_refused(places):
    cwd, conf = places
    (cwd / "a").mkdir()  # its parent exists from cwd, none from the file's folder; no sweep yet
    path = sweep_file(conf, "a/runs")
    with pytest.raises(SpecError) as err:
        load_sweep_file(path)
    message = refusal("a/runs", conf / "a" / "runs", cwd / "a" / "runs", "../cwd/a/runs")
    assert err.value.issues == [SpecIssue("sweep.root", message)]


def test_a_root_the_file_names_is_kept_where_it_exists_or_could(places):
    cwd, conf = places
    (cwd / "runs" / "s").mkdir(parents=True)
    (conf / "runs").mkdir()  # exists beside the file: that one, whatever cwd holds
    assert load_sweep_file(sweep_file(conf, "runs")).root == str(conf / "runs")
    # beside the file its parent exists (conf/), from cwd nothing holds this sweep: the file's one
    (cwd / "other").mkdir()
    assert load_sweep_file(sweep_file(conf, "other")).root == str(conf / "other")
    # neither exists anywhere: the file's
    assert load_sweep_file(sweep_file(conf, "x/y")).root == str(conf / "x" / "y")


def test_a_sweep_file_in_the_working_directory_keeps_its_root(places):
    cwd, _ = places
    path = cwd / "s.yaml"
    path.write_text("sweep:\n  specs: [a.yaml]\n  root: nowhere/runs\n")
    assert load_sweep_file(path).root == os.path.normpath(cwd / "nowhere/runs")


# names --------------------------------------------------------------------------------------------------


def test_a_derived_name_is_sweep_and_8_hex_characters():
    sweep = SweepSpec(
        specs=("b.yaml", "a.yaml"),
        seeds=(0, 1),
        overrides=("trainer.steps=2",),
        grid={"trainer.lr": ("1e-4", "3e-4")},
    )
    name = sweep_name(sweep)
    assert re.fullmatch(r"sweep-[0-9a-f]{8}", name)
    assert name == "sweep-14ebf9f3"  # the specs sorted: in either order the same folder
    assert sweep_name(sweep.model_copy(update={"specs": ("a.yaml", "b.yaml")})) == name
    assert sweep_name(sweep.model_copy(update={"name": "mine"})) == "mine"


def test_a_label_is_the_keys_last_part_and_the_value_without_odd_characters():
    assert _label("logging.project", "my team/x+1") == "projectmyteamx1"
    assert _label("a.b.c", "v_1.2-3") == "cv_1.2-3"
    assert _label("warm_start", "null") == "warm_startnull"


def test_grid_conditions_are_labelled_by_the_keys_last_part_and_a_sanitized_value(repo, tmp_path):
    sweep = SweepSpec(
        name="g",
        specs=(quickstart(repo),),
        grid={"warm_start": ("null",), "logging.project": ("my team/x", "a+b")},
        root=str(tmp_path),
    )
    assert [c.name for c in cells(sweep)] == [
        "quickstart-projectmyteamx-warm_startnull-s0",
        "quickstart-projectab-warm_startnull-s0",
    ]


# what the sweep owns ---------------------------------------------------------------------------------------


def test_each_key_the_sweep_owns_is_refused_with_what_to_use(repo, tmp_path):
    sweep = SweepSpec(
        name="own",
        specs=(quickstart(repo),),
        overrides=("seed=4", "name=x", "logging.root=r"),
        grid={"logging.group": ("g", "h")},
        root=str(tmp_path),
    )
    with pytest.raises(SpecError) as err:
        cells(sweep)
    assert err.value.file == "pats sweep"
    assert err.value.issues == [
        SpecIssue("seed", OWNED_TEXT + "--seeds (or the sweep's seeds:)", "override 'seed=4'"),
        SpecIssue("name", OWNED_TEXT + "the spec files' names", "override 'name=x'"),
        SpecIssue("logging.root", OWNED_TEXT + "--root", "override 'logging.root=r'"),
        SpecIssue(
            "logging.group",
            OWNED_TEXT + "--name (the sweep's name is the W&B group)",
            "override 'logging.group='",
        ),
    ]
    assert str(err.value).startswith(
        "pats sweep: 4 problems in the spec\n  seed: is set per cell by the sweep"
    )


def test_a_section_holding_owned_keys_and_a_key_under_one_are_refused():
    sweep = SweepSpec(
        specs=("a.yaml",),
        overrides=("logging={}", "logging.root.x=1", "seed.a=2", "logging.rootx=1", "log=1", "logging.wandb=disabled"),
    )  # fmt: skip
    assert _owned_issues(sweep) == [
        SpecIssue("logging", OWNED_TEXT + "--root", "override 'logging={}'"),
        SpecIssue(
            "logging", OWNED_TEXT + "--name (the sweep's name is the W&B group)", "override 'logging={}'"
        ),
        SpecIssue("logging.root.x", OWNED_TEXT + "--root", "override 'logging.root.x=1'"),
        SpecIssue("seed.a", OWNED_TEXT + "--seeds (or the sweep's seeds:)", "override 'seed.a=2'"),
    ]


# cells ------------------------------------------------------------------------------------------------------


def test_threads_go_to_a_cell_whose_spec_leaves_them_unset(repo, tmp_path):
    sweep = SweepSpec(name="t", specs=(quickstart(repo),), root=str(tmp_path))
    (cell,) = cells(sweep, threads=3)
    folder = tmp_path.absolute() / "t"
    assert cell.overrides == (
        "trainer.threads=3", "seed=0", "name=quickstart-s0", f"logging.root={folder}", "logging.group=t"
    )  # fmt: skip
    assert cell.spec.trainer.threads == 3
    (unasked,) = cells(sweep)
    assert unasked.spec.trainer.threads is None and "trainer.threads=3" not in unasked.overrides
    own = sweep.model_copy(update={"overrides": ("trainer.threads=2",)})
    (kept,) = cells(own, threads=3)
    assert kept.spec.trainer.threads == 2
    assert kept.overrides == (
        "trainer.threads=2", "seed=0", "name=quickstart-s0", f"logging.root={folder}", "logging.group=t"
    )  # fmt: skip


def test_a_failing_grid_value_does_not_hide_the_next_ones_problems(repo, tmp_path):
    sweep = SweepSpec(
        name="bad",
        specs=(quickstart(repo), str(repo / "experiments/baselines/grpo.yaml")),
        grid={"trainer.lr": ("fast", "slow")},
        root=str(tmp_path),
    )
    with pytest.raises(SpecError) as err:
        cells(sweep)
    not_a_number = "'{}' is not a number; write a number such as 0.5"
    assert err.value.issues == [
        SpecIssue("trainer.lr", not_a_number.format("fast"), "override 'trainer.lr=fast'"),
        SpecIssue("trainer.lr", not_a_number.format("slow"), "override 'trainer.lr=slow'"),
    ]  # once each, though both specs fail on both


def test_two_specs_of_one_name_and_a_spec_given_twice(repo, tmp_path):
    grpo = str(repo / "experiments/baselines/grpo.yaml")
    other = tmp_path / "other.yaml"
    other.write_text(f"defaults: [{quickstart(repo)}]\nname: quickstart-grpo\n")
    sweep = SweepSpec(
        name="dup",
        specs=(grpo, str(other), quickstart(repo), quickstart(repo)),
        seeds=(0, 1),
        root=str(tmp_path / "runs"),
    )
    with pytest.raises(SpecError) as err:
        cells(sweep)
    assert err.value.file == "pats sweep"
    assert err.value.issues == [
        SpecIssue(
            "name",
            f"'quickstart-grpo' is the name of both {grpo} and {other}; give each spec its own name: (a "
            "condition is a spec's name)",
            str(other),
        ),
        SpecIssue("specs", f"{quickstart(repo)} is given twice", "pats sweep"),
    ]


def test_a_cell_is_frozen(repo, tmp_path):
    (cell,) = cells(SweepSpec(name="f", specs=(quickstart(repo),), root=str(tmp_path)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cell.seed = 1  # type: ignore[misc]


def test_a_problem_two_specs_share_is_reported_once_naming_where_it_was_set_and_the_cells(repo, tmp_path):
    """Issue 59, item 5: a problem set in one spec file and reached through another's include (as
    experiments/ablations/../quickstart.yaml) was reported once per spec, and none named the cells."""
    base, other = tmp_path / "base.yaml", tmp_path / "sub" / "other.yaml"
    base.write_text(f"defaults: [{quickstart(repo)}]\nname: base\nscaffold:\n  probe_fraction: 0.25\n")
    other.parent.mkdir()
    other.write_text("defaults: [../base.yaml]\nname: other\n")
    sweep = SweepSpec(name="bad", specs=(str(base), str(other)), seeds=(0, 1), root=str(tmp_path),
                      overrides=("trainer.group_size=2",), grid={"trainer.lr": ("1e-4", "3e-4")})  # fmt: skip
    with pytest.raises(SpecError) as err:
        cells(sweep)
    message = (
        "0.25 of trainer.group_size 2 gives 0 probe rollouts; it must leave at least one rollout with and one "
        "without the scaffold: use 0.5, or 0 to turn probes off"
    )
    assert err.value.issues == [
        SpecIssue(
            "scaffold.probe_fraction",
            message,
            f"{base}:4; in the cells of {base} trainer.lr=1e-4, {base} trainer.lr=3e-4, {other} trainer.lr=1e-4 "
            "and 1 more",
        )
    ]
    one = sweep.model_copy(update={"specs": (str(base),), "grid": {}})
    with pytest.raises(SpecError) as err:
        cells(one)
    assert err.value.issues == [SpecIssue("scaffold.probe_fraction", message, f"{base}:4")]
    alone = sweep.model_copy(update={"specs": (str(other),), "grid": {}})
    with pytest.raises(SpecError) as err:
        cells(alone)
    assert err.value.issues == [
        SpecIssue("scaffold.probe_fraction", message, f"{base}:4; in the cells of {other}")
    ]


def test_a_problem_in_three_cells_names_all_three_and_a_yml_include_is_one_file(repo, tmp_path):
    """Three cells are named in full (no "and 0 more"), and a `.yml` spec reached through two includes
    (sub/../base.yml) is one problem, as a `.yaml` one is."""
    base = tmp_path / "base.yml"
    base.write_text(f"defaults: [{quickstart(repo)}]\nname: base\nscaffold:\n  probe_fraction: 0.25\n")
    (tmp_path / "sub").mkdir()
    specs = [tmp_path / "sub" / f"{name}.yml" for name in ("one", "two")]
    for spec in specs:
        spec.write_text(f"defaults: [../base.yml]\nname: {spec.stem}\n")
    sweep = SweepSpec(name="bad", specs=(str(base), *map(str, specs)), root=str(tmp_path),
                      overrides=("trainer.group_size=2",))  # fmt: skip
    with pytest.raises(SpecError) as err:
        cells(sweep)
    (issue,) = err.value.issues
    assert issue.source == f"{base}:4; in the cells of {base}, {specs[0]}, {specs[1]}"


def test_a_problem_no_file_names_is_placed_in_its_cells():
    """A problem the loader could not place in a file or an override is said to be in the cells it was
    found in (at most three named, then how many more)."""
    from pats.sweep.grid import _in

    found = SpecIssue("trainer", "a problem")
    assert _in(found, ["a.yaml x=1", "a.yaml x=2"]) == SpecIssue(
        "trainer", "a problem", "a.yaml x=1, a.yaml x=2"
    )
    four = ["a", "b", "c", "d"]
    assert _in(found, four) == SpecIssue("trainer", "a problem", "a, b, c and 1 more")
