"""Files a spec names are read relative to the spec file that names them (as `defaults:` are), held as
absolute paths, and checked by `pats validate` and `pats run` before anything is loaded."""

from __future__ import annotations

import json
from pathlib import Path

from pats.cli.main import main
from pats.spec import load_spec, spec_to_yaml

REPO = Path(__file__).resolve().parents[1]
BANK = {"entries": [{"kind": "skill", "scope": "type:twc", "text": "Look around first."}]}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def static_spec(folder: Path, bank: str) -> Path:
    return write(
        folder / "static.yaml",
        f"defaults: [{REPO / 'experiments' / 'quickstart.yaml'}]\n"
        f"scaffold: {{mode: static, probe_fraction: 0.0, cards: [outcome], initial_bank: {bank}}}\n",
    )


def test_a_relative_bank_is_read_beside_the_spec_from_any_working_directory(tmp_path, monkeypatch):
    write(tmp_path / "specs" / "banks" / "mine.json", json.dumps(BANK))
    spec_path = static_spec(tmp_path / "specs", "banks/mine.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(spec_path)
    assert spec.scaffold.initial_bank == str(tmp_path / "specs" / "banks" / "mine.json")
    # The saved spec (a run directory's spec.yaml) names the same file wherever it is loaded from.
    saved = write(tmp_path / "run" / "spec.yaml", spec_to_yaml(spec))
    assert load_spec(saved).scaffold.initial_bank == spec.scaffold.initial_bank


def test_a_base_spec_path_is_read_beside_the_base_and_an_override_beside_the_caller(tmp_path, monkeypatch):
    write(tmp_path / "base" / "bank.json", json.dumps(BANK))
    static_spec(tmp_path / "base", "bank.json")
    child = write(
        tmp_path / "child" / "deep" / "run.yaml", "defaults: [../../base/static.yaml]\nname: child\n"
    )
    monkeypatch.chdir(tmp_path)
    assert load_spec(child).scaffold.initial_bank == str(tmp_path / "base" / "bank.json")
    overridden = load_spec(child, ["scaffold.initial_bank=base/bank.json"])
    assert overridden.scaffold.initial_bank == str(tmp_path / "base" / "bank.json")


def test_lists_of_data_files_are_anchored_one_by_one(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATS_DATA", "data")  # relative: read from the working directory
    spec = load_spec(REPO / "experiments" / "search_qa" / "pats.yaml")
    data = tmp_path / "data"
    assert spec.environment.train_data[0] == str(data / "qa/graphrag_r2/popqa/train.parquet")
    assert all(Path(p).is_absolute() for p in spec.environment.eval_data)
    assert spec.environment.retriever.corpus.startswith(str(data))


def test_without_pats_data_shipped_specs_read_their_data_under_the_cache(monkeypatch, tmp_path):
    """`${data:...}` is $PATS_DATA, else <cache>/data: never a folder outside the checkout."""
    monkeypatch.delenv("PATS_DATA", raising=False)
    monkeypatch.setenv("PATS_CACHE", str(tmp_path / "cache"))
    spec = load_spec(REPO / "experiments" / "alfworld" / "local.yaml")
    assert spec.environment.data_dir == str(tmp_path / "cache" / "data" / "alfworld")
    for path in (REPO / "experiments").rglob("*.yaml"):
        assert "shared/data" not in path.read_text(), f"{path} names ../shared/data"


def test_validate_refuses_a_missing_bank_and_names_the_key(tmp_path, capsys):
    spec_path = static_spec(tmp_path, "nowhere/bank.json")
    assert main(["validate", str(spec_path)]) == 2
    err = capsys.readouterr().err
    assert "scaffold.initial_bank" in err and str(tmp_path / "nowhere" / "bank.json") in err
    assert "does not exist" in err and f"[{spec_path}:2]" in err, "the line that names the file (issue 25)"
    assert main(["validate", str(spec_path), "scaffold.initial_bank=elsewhere.json"]) == 2
    assert "[override 'scaffold.initial_bank=elsewhere.json']" in capsys.readouterr().err


def test_validate_refuses_a_bank_in_neither_format(tmp_path, capsys):
    write(tmp_path / "bank.json", json.dumps(["not", "a", "bank"]))
    assert main(["validate", str(static_spec(tmp_path, "bank.json"))]) != 0
    assert "expected a JSON object" in capsys.readouterr().err


def test_run_stops_on_a_missing_file_before_it_writes_a_run_directory(tmp_path, capsys):
    spec_path = static_spec(tmp_path, "nowhere/bank.json")
    runs = tmp_path / "runs"
    assert main(["run", str(spec_path), f"logging.root={runs}"]) == 2
    assert "scaffold.initial_bank" in capsys.readouterr().err
    assert not runs.exists()
