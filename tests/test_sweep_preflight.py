"""Before any cell runs, `pats run`'s LLM preflight for every distinct LLM the grid's cells will call
(issue 49, item 6), so a sweep does not fail hours in when a cell that calls a misconfigured LLM starts.
The scripted OpenAI-compatible server on 127.0.0.1 (pats.testing.ScriptedOpenAIServer) serves one model
and answers 404 for any other, as a real one does."""

from __future__ import annotations

import pytest

from pats.errors import PrerequisiteError
from pats.sweep import SweepSpec, run_sweep
from pats.testing import ScriptedOpenAIServer
from pats.testing.sweep import scripted_trainers

KEY_ENV = "PATS_TEST_KEY"
SPEC = """\
name: llm
environment: {{kind: twx}}
scaffold: {{mode: pats}}
reviser:
  kind: llm
  llm: {{model: openai/served, api_base: "{base_url}", api_key_env: {key}, timeout_s: 5, max_retries: 0}}
trainer: {{steps: 2, tasks_per_step: 2, group_size: 4}}
eval: {{every: 2, at_start: false, with_scaffold: false, num_tasks: 2, gap_tasks: 0}}
logging: {{wandb: disabled, progress: false}}
"""


def test_every_distinct_llm_answers_before_any_cell_runs(write, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with ScriptedOpenAIServer(models=["served"]) as server:
        spec = write("llm.yaml", SPEC.format(base_url=server.base_url, key=KEY_ENV))
        grid = {"reviser.llm.model": ("openai/served", "openai/other")}
        sweep = SweepSpec(name="llm", specs=(str(spec),), seeds=(0, 1), grid=grid, root=str(tmp_path))
        with pytest.raises(PrerequisiteError) as err:
            run_sweep(sweep, say=lambda line: None, trainers=scripted_trainers())
        assert len(server.preflights) == 1  # openai/served asked once for its two cells
    text = str(err.value)
    assert "reviser.llm (openai/other at " in text and "(404)" in text and "openai/served" not in text
    assert not (tmp_path / "llm").exists()  # nothing written, no cell started


def test_cells_that_call_no_llm_are_not_checked(write, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)  # a cell that called the LLM would stop on the unset key
    spec = write("llm.yaml", SPEC.format(base_url="http://127.0.0.1:9/v1", key=KEY_ENV))
    sweep = SweepSpec(name="none", specs=(str(spec),), overrides=("scaffold.mode=none",), root=str(tmp_path))
    assert [r.status for r in run_sweep(sweep, say=lambda line: None, trainers=scripted_trainers())] == [
        "ran"
    ]
