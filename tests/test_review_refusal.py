"""An edit set the store would refuse never stops a run (issue 15).

`pats run` with an LLM reviser (the scripted OpenAI-compatible server on 127.0.0.1) that answers every
review with a family-level plan: a `plan` scoped `type:<t>`, which the store refuses (plans are
task-scoped). The review refuses it first, retries once with the errors, then the rules reviser
answers; the run completes every step. Behind that, the engine refuses an edit set the store raises on
(it logs it and keeps the current version) instead of stopping the run.
"""

from __future__ import annotations

import asyncio
import json
import re

from pats.build import build_scaffold_policy
from pats.cli.main import main
from pats.engine import run as run_module
from pats.logging.events import (
    EditEvent,
    FallbackEvent,
    RefusedEvent,
    StepEndEvent,
    VersionEvent,
    read_events,
)
from pats.testing import FakeEnv, ScriptedBackend, ScriptedOpenAIServer, improving_schedule
from pats.testing.engine import fake_engine
from pats.types import AddEdit, ReviewResult

STEPS = 3
PLAN_ERROR = "a plan belongs to one task"
STORE_REFUSED = "the store refused the step's edit set"


def family_plan(body: dict) -> str:
    """A reviser answer a careful LLM might give: one plan for the whole task type, citing real cards."""
    prompt = body["messages"][-1]["content"]
    task_type = re.search(r"\[\[ ## task_type ## \]\]\s*(\S+)", prompt).group(1)
    cards = list(dict.fromkeys(re.findall(r"^\[(c\d+-\S+?)\]", prompt, flags=re.M)))
    edits = [
        {
            "op": "ADD",
            "kind": "plan",
            "scope": f"type:{task_type}",
            "text": f"For every {task_type} task: look, go to the room named in the goal, take the item.",
            "cites": cards[:2],
        }
    ]
    return f"[[ ## edits ## ]]\n{json.dumps(edits)}\n\n[[ ## completed ## ]]"


SPEC = """\
name: family-plan
environment: {{kind: twx}}
scaffold: {{mode: pats}}
reviser:
  kind: llm
  llm: {{model: openai/scripted, api_base: "{base_url}", api_key_env: PATS_TEST_KEY, timeout_s: 5.0, max_retries: 0}}
trainer: {{steps: {steps}, tasks_per_step: 4, group_size: 4, checkpoint_every: 1}}
eval: {{every: 100, at_start: false, with_scaffold: false, num_tasks: 2}}
logging: {{root: "{root}", wandb: disabled, progress: false}}
"""


def test_pats_run_survives_a_reviser_that_answers_a_type_scoped_plan(tmp_path, monkeypatch, write):
    monkeypatch.setenv("PATS_TEST_KEY", "sk-test")
    monkeypatch.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=4))
    monkeypatch.setattr(
        run_module, "make_backend", lambda spec, make_env: ScriptedBackend(improving_schedule(), seed=3)
    )
    with ScriptedOpenAIServer([family_plan] * 40) as server:
        spec = write("family-plan.yaml", SPEC.format(base_url=server.base_url, steps=STEPS, root=tmp_path))
        assert main(["run", str(spec)]) == 0, "an ordinary reviser answer must not stop the run"
        requests = [r["messages"][-1]["content"] for r in server.requests]

    log = tmp_path / "family-plan" / "events.jsonl"
    assert [e.step for e in read_events(log, StepEndEvent)] == list(range(STEPS))
    refused = [e.problem for e in read_events(log, RefusedEvent)]
    assert any("attempt 1" in p and PLAN_ERROR in p for p in refused), refused
    assert any("attempt 2" in p and PLAN_ERROR in p for p in refused), refused
    assert read_events(log, FallbackEvent), "the rules reviser should have answered"
    # The second attempt was told what to write instead.
    assert any(PLAN_ERROR in r and "scope it 'task:<task id>'" in r for r in requests)
    edits = [e.edit for e in read_events(log, EditEvent)]
    assert edits, "the rules reviser's edits should have been applied"
    assert not [e for e in edits if e.op == "ADD" and e.kind == "plan" and e.scope.startswith("type:")]
    assert not [p for p in refused if STORE_REFUSED in p], "the review should have refused it first"
    assert all(e.metrics["review/store_refused"] == 0.0 for e in read_events(log, StepEndEvent))


class PassEverything:
    """A scaffold policy whose review lets a set through that the store refuses (a bug stand-in)."""

    def __init__(self, inner):
        self.inner, self.store, self.mode = inner, inner.store, inner.mode

    def plan(self, *args):
        return self.inner.plan(*args)

    def view(self, task):
        return self.inner.view(task)

    def view_entries(self, group):
        return self.inner.view_entries(group)

    async def review(self, step, groups):
        result = await self.inner.review(step, groups)
        bad = AddEdit(kind="plan", scope="general", text="One plan for every task.", cites=())
        return result.model_copy(update={"edits": (*result.edits, bad)})

    def commit(self, result: ReviewResult, step: int):
        return self.inner.commit(result, step)  # the store refuses; the step ends as any other

    def judge_state(self):
        return self.inner.judge_state()

    def load_judge_state(self, state):
        self.inner.load_judge_state(state)


def test_the_engine_keeps_training_when_the_store_refuses_a_set(tmp_path, count_tokens):
    from pats.spec.models import ExperimentSpec

    spec = ExperimentSpec.model_validate(
        {
            "name": "store-refuses",
            "environment": {"kind": "twx"},
            "scaffold": {"mode": "pats"},
            "trainer": {"steps": STEPS, "tasks_per_step": 4, "group_size": 4},
            "eval": {"every": 100, "at_start": False, "with_scaffold": False},
        }
    )
    scaffold = PassEverything(
        build_scaffold_policy(spec, tmp_path / "scaffold", count_tokens, FakeEnv(num_tasks=4).expert_plan)
    )
    engine = fake_engine(
        spec, tmp_path, ScriptedBackend(improving_schedule(), seed=3), count_tokens, scaffold
    )
    asyncio.run(engine.run())
    engine.events.close()

    log = tmp_path / "events.jsonl"
    ends = read_events(log, StepEndEvent)
    assert [e.step for e in ends] == list(range(STEPS))
    assert all(e.metrics["review/store_refused"] == 1.0 for e in ends)
    refusals = [e for e in read_events(log, RefusedEvent) if STORE_REFUSED in e.problem]
    assert [e.step for e in refusals] == list(range(STEPS))
    assert all(PLAN_ERROR in e.problem for e in refusals)
    assert scaffold.store.current.number == 0, "a refused set leaves the scaffold version as it was"
    assert not read_events(log, VersionEvent)
    assert not read_events(log, EditEvent), "edits the store refused are not logged as applied"
