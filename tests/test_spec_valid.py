"""Every shipped spec validates; the schema is in sync; `pats show` round-trips."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from pats.cli.main import main
from pats.errors import SpecNotice
from pats.spec import ExperimentSpec, load_spec, spec_to_yaml
from pats.spec.schema import SCHEMA_PATH, SWEEP_SCHEMA_PATH, schema_texts
from pats.sweep.grid import SweepSpec, is_sweep_file

REPO = Path(__file__).resolve().parents[1]
# Experiment specs; sweep files (experiments/sweeps/, one key `sweep:`) are checked in tests/test_sweep.py.
SPECS = sorted(p.relative_to(REPO) for p in (REPO / "experiments").rglob("*.yaml") if not is_sweep_file(p))


def test_there_are_specs_for_every_environment_and_mode():
    specs = [load_spec(REPO / p) for p in SPECS]
    assert {s.environment.kind for s in specs} == {"twx", "alfworld", "webshop", "search_qa"}
    assert {s.scaffold.mode for s in specs} == {"none", "static", "grow", "pats"}
    assert {s.reviser.kind for s in specs} == {"rules", "llm"}


@pytest.mark.parametrize("path", SPECS, ids=str)
def test_shipped_spec_validates_and_opens_with_its_command(path, monkeypatch):
    monkeypatch.chdir(REPO)
    spec = load_spec(path)
    assert isinstance(spec, ExperimentSpec)
    first = (REPO / path).read_text().splitlines()[0]
    assert first.startswith("# Run:") and "pats run" in first, (
        f"{path} must open with the command that runs it"
    )


@pytest.mark.parametrize("path", SPECS, ids=str)
def test_show_output_round_trips(path, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    spec = load_spec(path)
    again = tmp_path / "shown.yaml"
    again.write_text(spec_to_yaml(spec))
    assert load_spec(again) == spec


def test_cli_show_prints_resolved_spec(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["show", "experiments/baselines/grpo.yaml", "trainer.steps=7"]) == 0
    out = capsys.readouterr().out
    assert "mode: none" in out and "steps: 7" in out and "name: quickstart-grpo" in out


def test_cli_validate_all_experiments_exits_zero(monkeypatch, capsys, shared_data):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATS_DATA", str(shared_data))
    assert main(["validate", *map(str, SPECS)]) == 0
    assert capsys.readouterr().out.count("ok: ") == len(SPECS)


def test_without_the_data_only_specs_that_read_it_fail_and_they_say_how_to_fetch_it(
    monkeypatch, capsys, tmp_path
):
    """A fresh clone: the data root is empty, so the specs naming `${data:...}` are refused, with the
    command that fetches their data; every other shipped spec validates."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATS_DATA", str(tmp_path))
    needs_data = {p for p in SPECS if "${data:" in (REPO / p).read_text()}
    assert len(needs_data) == 6
    assert main(["validate", *map(str, sorted(set(SPECS) - needs_data))]) == 0
    for path in sorted(needs_data):
        assert main(["validate", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path}/" in err and "`pats data fetch NAME` gets it" in err, err


def test_schema_files_are_in_sync_with_models():
    texts = schema_texts(SweepSpec)
    assert sorted(texts) == [SCHEMA_PATH, SWEEP_SCHEMA_PATH]
    for path, text in texts.items():
        assert (REPO / path).read_text() == text, f"{path} drifted from the spec models: run `pats schema`"
    assert sorted(p.name for p in (REPO / "schemas").iterdir()) == [
        "experiment.schema.json",
        "sweep.schema.json",
    ]
    full = json.loads(texts[SCHEMA_PATH])["$defs"]["ExperimentSpec"]
    assert "defaults" in full["properties"] and "environment" in full["required"]


def test_every_shipped_spec_file_fits_the_editor_schema_derived_ones_too():
    """What an editor sees: the YAML as written, before the loader merges `defaults:`."""
    validator = jsonschema.Draft202012Validator(json.loads((REPO / SCHEMA_PATH).read_text()))
    for path in SPECS:
        problems = [e.message for e in validator.iter_errors(yaml.safe_load((REPO / path).read_text()))]
        assert not problems, (path, problems)
    assert not list(validator.iter_errors({"defaults": ["base.yaml"], "trainer": {"steps": 5}}))
    assert [e.message for e in validator.iter_errors({"name": "x"})] == [
        "'environment' is a required property"
    ]
    assert list(validator.iter_errors({"defaults": ["base.yaml"], "trainer": {"stepz": 5}})), (
        "typos still flagged"
    )


def test_schema_check_detects_drift(tmp_path, capsys):
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 1  # neither file is there
    assert main(["schema", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["experiment.schema.json", "sweep.schema.json"]
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "sweep.schema.json").write_text("{}\n")  # either one drifting fails the check
    capsys.readouterr()
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'sweep.schema.json'} is out of date with the spec models; run `pats schema` "
        "to rewrite it\n"
    )


def test_defaults_fill_in_and_kinds_default(write):
    spec = load_spec(write("s.yaml", "name: x\nenvironment: {kind: twx}\ntrainer: {steps: 3}\n"))
    assert spec.trainer.backend == "local" and spec.trainer.steps == 3
    assert spec.judge.kind == "stats" and spec.reviser.kind == "rules"
    assert spec.scaffold.cards == ("outcome", "contrast", "failure", "utility")
    with pytest.raises(ValidationError, match="frozen"):
        spec.trainer.steps = 4


def test_kind_change_replaces_section_instead_of_merging(write):
    write(
        "base.yaml",
        "name: b\nenvironment: {kind: twx}\nreviser: {kind: llm, llm: {model: openai/gpt-4o-mini}}\n",
    )
    child = write("child.yaml", "defaults: [base.yaml]\nname: c\nreviser: {kind: rules}\n")
    with pytest.warns(SpecNotice, match=r"reviser: kind llm -> rules \(.*child.yaml\).*llm=\{'model'"):
        assert load_spec(child).reviser.kind == "rules"
        assert load_spec(child, ["reviser.kind=rules"]).reviser.kind == "rules"


def test_interpolation_and_env_default(write, monkeypatch):
    monkeypatch.delenv("PATS_DATA", raising=False)
    path = write(
        "s.yaml",
        "name: x\nenvironment: {kind: twx, num_eval_tasks: 8}\n"
        "eval: {num_tasks: '${environment.num_eval_tasks}'}\n"
        "scaffold: {mode: static, initial_bank: '${oc.env:PATS_DATA,/data}/bank.json'}\n",
    )
    spec = load_spec(path)
    assert spec.eval.num_tasks == 8 and spec.scaffold.initial_bank == "/data/bank.json"
    monkeypatch.setenv("PATS_DATA", "/elsewhere")
    assert load_spec(path).scaffold.initial_bank == "/elsewhere/bank.json"


def test_probe_count_follows_fraction(write):
    spec = load_spec(write("s.yaml", "name: x\nenvironment: {kind: twx}\ntrainer: {group_size: 8}\n"))
    assert spec.probe_count() == 2
    assert (
        load_spec(
            write("n.yaml", "name: x\nenvironment: {kind: twx}\nscaffold: {mode: none}\n")
        ).probe_count()
        == 0
    )


JUDGE_FILES = sorted(p.relative_to(REPO) for p in (REPO / "judges").glob("*.yaml"))


def test_every_judge_file_validates(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert {p.stem for p in JUDGE_FILES} >= {"twx", "alfworld", "webshop", "search_qa", "reviser"}
    assert main(["validate", *map(str, JUDGE_FILES)]) == 0
    out = capsys.readouterr().out
    assert out.count("(judge rubric)") == len(JUDGE_FILES) - 1 and "(reviser prompt)" in out


def test_broken_rubric_is_refused(tmp_path, capsys):
    bad = tmp_path / "judges" / "twx.yaml"
    bad.parent.mkdir()
    bad.write_text("instructions: grade\nlabels: 3\n")
    assert main(["validate", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
