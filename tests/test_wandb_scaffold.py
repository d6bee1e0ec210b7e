"""The scaffold in W&B (a real offline run): each new version as a table of its entries, and the run's
scaffold folder as an artifact when the run ends."""

from __future__ import annotations

import asyncio
import json

from pats.logging.sinks import WandbSink
from pats.spec.models import ExperimentSpec
from pats.testing.engine import fake_engine
from pats.testing.fakes import ScriptedBackend, improving_schedule


def test_scaffold_versions_reach_wandb_as_tables_and_the_folder_as_an_artifact(tmp_path, count_tokens, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    spec = ExperimentSpec.model_validate(
        {
            "name": "wandb-scaffold",
            "environment": {"kind": "twx", "num_eval_tasks": 4},
            "scaffold": {"mode": "pats", "budget": {"max_entries": 12, "max_tokens": 600, "view_tokens": 300}},
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
    assert staged and any(b"wandb-scaffold-scaffold" in p.read_bytes() for p in staged), "no scaffold artifact"
