"""`pats scaffold RUN_DIR`: the guidance's history, read back from the store's version files."""

from __future__ import annotations

import asyncio
import json

from pats.cli.main import main
from pats.logging.events import EditEvent, GroupsEvent, read_events
from pats.spec.models import ExperimentSpec
from pats.testing import ScriptedBackend, improving_schedule
from pats.testing.engine import fake_engine


def spec() -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "history",
            "environment": {"kind": "twx", "num_eval_tasks": 4},
            "scaffold": {
                "mode": "pats",
                "budget": {"max_entries": 12, "max_tokens": 600, "view_tokens": 300},
            },
            "trainer": {"steps": 30, "tasks_per_step": 4, "group_size": 4},
            "eval": {"every": 100, "at_start": False},
        }
    )


def test_history_lists_every_edit_of_the_run(tmp_path, count_tokens, capsys):
    engine = fake_engine(spec(), tmp_path, ScriptedBackend(improving_schedule(), seed=1), count_tokens)
    asyncio.run(engine.run())
    engine.events.close()
    versions = sorted((tmp_path / "scaffold" / "versions").glob("*.json"))
    edits = [e.edit for e in read_events(tmp_path / "events.jsonl", EditEvent)]
    assert {"ADD", "DELETE"} <= {e.op for e in edits}

    assert main(["scaffold", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert sum(line.startswith("version ") for line in lines) == len(versions)
    added = [line for line in lines if line.startswith("  + ")]
    removed = [line for line in lines if line.startswith("  - ")]
    assert len(added) == sum(e.op == "ADD" for e in edits)
    assert len(removed) == sum(e.op == "DELETE" for e in edits)
    last = json.loads(versions[-1].read_text())
    assert f"{len(last['entries'])} entries" in [line for line in lines if line.startswith("version ")][-1]

    assert all(f"[cites {', '.join(e['cites'])}]" in out for e in last["entries"] if e["cites"])

    assert main(["scaffold", str(tmp_path), "--version", str(last["number"])]) == 0
    full = capsys.readouterr().out
    assert all(e["text"] in full for e in last["entries"])

    assert main(["scaffold", str(tmp_path), "--diff", "0", str(last["number"])]) == 0
    whole = capsys.readouterr().out.splitlines()
    assert whole[0].startswith(f"version 0 -> version {last['number']}")
    assert sorted(line.split()[1] for line in whole[1:]) == sorted(e["id"] for e in last["entries"])
    assert all(line.startswith("  + ") for line in whole[1:]), "from the empty version 0 all is added"

    assert main(["scaffold", str(tmp_path), "--version", "999"]) == 1
    assert f"known numbers are 0..{last['number']}" in capsys.readouterr().err

    # --at STEP: the version the step's rollouts were pinned to, as the event log says.
    groups = {e.step: e.groups for e in read_events(tmp_path / "events.jsonl", GroupsEvent)}
    step = next(s for s in sorted(groups) if s > 0 and groups[s][0].version != groups[0][0].version)
    pinned = next(
        json.loads(p.read_text())
        for p in versions
        if json.loads(p.read_text())["hash"] == groups[step][0].version
    )
    assert main(["scaffold", str(tmp_path), "--at", str(step)]) == 0
    at = capsys.readouterr().out
    assert at.startswith(f"at step {step}: version ") and f"hash {pinned['hash']}" in at
    assert all(e["text"] in at for e in pinned["entries"])
    assert main(["scaffold", str(tmp_path), "--at", "500"]) == 1
    assert "no rollouts of step 500" in capsys.readouterr().err

    assert main(["report", str(tmp_path)]) == 0
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "## Scaffold history" in summary and added[0].strip() in summary


def test_a_folder_without_versions_says_what_to_give(tmp_path, capsys):
    assert main(["scaffold", str(tmp_path)]) == 1
    assert "runs/quickstart" in capsys.readouterr().err


def test_on_a_terminal_the_history_is_coloured(monkeypatch, capsys):
    from pats.scaffold import history

    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    history.print_text("version 1 (after step 0): 1 entries, 5 tokens\n  + e1 skill   general: Look first.")
    out = capsys.readouterr().out
    assert "Look first." in out and "\x1b[32m" in out, "added lines in green"
