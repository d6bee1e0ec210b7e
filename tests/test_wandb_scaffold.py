"""The scaffold in W&B (a real offline run): each new version as a table of its entries, and the run's
scaffold folder as an artifact when the run ends."""

from __future__ import annotations

import asyncio
import json

from pats.logging.sinks import WandbSink
from pats.spec.models import ExperimentSpec
from pats.testing.engine import fake_engine
from pats.testing.fakes import ScriptedBackend, improving_schedule


def test_scaffold_versions_reach_wandb_as_tables_and_the_folder_as_an_artifact(
    tmp_path, count_tokens, monkeypatch
):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    spec = ExperimentSpec.model_validate(
        {
            "name": "wandb-scaffold",
            "environment": {"kind": "twx", "num_eval_tasks": 4},
            "scaffold": {
                "mode": "pats",
                "budget": {"max_entries": 12, "max_tokens": 600, "view_tokens": 300},
            },
            "trainer": {"steps": 4, "tasks_per_step": 4, "group_size": 4},
            "eval": {"every": 10, "at_start": False},
        }
    )
    sink = WandbSink(tmp_path, "pats-test", None, "offline", spec.name, spec.model_dump(mode="json"))
    engine = fake_engine(spec, tmp_path, ScriptedBackend(improving_schedule(), seed=1), count_tokens)
    engine.sinks = [sink]
    asyncio.run(engine.run())
    engine.events.close()
    sink.close()

    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    tables = sorted((run / "files" / "media" / "table" / "scaffold").glob("entries_*.table.json"))
    versions = sorted((tmp_path / "scaffold" / "versions").glob("*.json"))
    assert tables and len(tables) <= len(versions)  # one per step that made a version
    last = json.loads(tables[-1].read_text())
    assert last["columns"][:5] == ["version", "id", "kind", "scope", "text"]
    texts = {row[4] for row in last["data"]}
    newest = json.loads(versions[-1].read_text())
    assert texts == {e["text"] for e in newest["entries"]}, "the last table is the last version's entries"
    staged = list((tmp_path / "wandb").rglob("*.wandb"))
    assert staged and any(b"wandb-scaffold-scaffold" in p.read_bytes() for p in staged), (
        "no scaffold artifact"
    )


def test_pats_report_logs_the_report_to_the_runs_own_wandb_run(tmp_path, count_tokens, capsys):
    from pats.cli.main import main
    from pats.engine.run import Checkpoint
    from pats.spec.loader import spec_to_yaml

    spec = ExperimentSpec.model_validate(
        {
            "name": "wandb-report",
            "environment": {"kind": "twx", "num_eval_tasks": 4},
            "scaffold": {"mode": "pats"},
            "trainer": {"steps": 2, "tasks_per_step": 4, "group_size": 4},
            "eval": {"every": 10, "at_start": False},
            "logging": {"root": str(tmp_path), "wandb": "offline"},
        }
    )
    sink = WandbSink(tmp_path, spec.logging.project, None, "offline", spec.name, spec.model_dump(mode="json"))
    engine = fake_engine(spec, tmp_path, ScriptedBackend(improving_schedule(), seed=1), count_tokens)
    engine.sinks = [sink]
    asyncio.run(engine.run())
    engine.events.close()
    sink.close()
    (tmp_path / "spec.yaml").write_text(spec_to_yaml(spec))
    (tmp_path / "checkpoints").mkdir()
    state = Checkpoint(step=1, path=str(tmp_path / "checkpoints"), wandb_id=sink.run_id)
    (tmp_path / "checkpoints" / "latest.json").write_text(state.model_dump_json())

    assert main(["report", str(tmp_path)]) == 0
    assert f"W&B run {sink.run_id}" in capsys.readouterr().out
    # The resumed run gets a folder of its own, under the same id (W&B adds "-1" to its name when it
    # starts within the same second as the first).
    runs = sorted((tmp_path / "wandb").glob(f"offline-run-*-{sink.run_id}*"))
    assert len(runs) == 2 and set(runs) == set((tmp_path / "wandb").glob("offline-run-*")), "one W&B run id"
    assert b"wandb-report-report" in b"".join(p.read_bytes() for r in runs for p in r.glob("*.wandb"))
    # The report's run (resumed offline, so it cannot read them back) names the run and its config.
    report_run = b"".join(p.read_bytes() for p in runs[-1].glob("*.wandb"))
    assert b"tasks_per_step" in report_run and report_run.count(b"wandb-report") > report_run.count(
        b"wandb-report-report"
    ), "the report's W&B run has the run's name and config"
