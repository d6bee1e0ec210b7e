"""The scaffold service as a real Ray actor (local Ray, 1 CPU), driven by the real pats agent loops
in verl's AgentLoopWorker, on a real TextWorldExpress game with a scripted policy (no model).

Step 1: the three rollouts of a group see one version (the seeded bank); one wins, two fail, so the
rules reviser writes a plan for the task at the step boundary. Step 2: the group sees the new version
and its plan. Validation rows never see a scaffold.
"""

from __future__ import annotations

import json

import pytest

from pats.testing.verl import composed_config, expert_task, require_verl_or_skip, rows_batch

require_verl_or_skip()
import ray
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.protocol import DataProto
from verl.workers.rollout.replica import TokenOutput

from pats.backends.verl.data import task_rows
from pats.backends.verl.service import connect
from pats.envs.twx import TwxEnv
from pats.logging.events import EditEvent, StepEndEvent, read_events
from pats.scaffold.render import HEADER
from pats.spec import load_spec

pytestmark = pytest.mark.slow  # local Ray and real JVMs (still CPU, still in CI)

PROMPT = 512


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=1, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


class ScriptedServer:
    """Of the trajectories that start from the same prompt (a group), the first plays the gold plan
    (a win); the others repeat 'look around' (they fail)."""

    def __init__(self, tokenizer, plan: list[str]):
        self.tokenizer, self.plan = tokenizer, plan
        self.roles: dict[str, bool] = {}  # request id -> plays the plan
        self.starts: set[tuple[int, ...]] = set()
        self.turns: dict[str, int] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        if request_id not in self.roles:
            self.roles[request_id] = tuple(prompt_ids) not in self.starts
            self.starts.add(tuple(prompt_ids))
        k = self.turns[request_id] = self.turns.get(request_id, -1) + 1
        action = self.plan[k] if self.roles[request_id] and k < len(self.plan) else "look around"
        ids = self.tokenizer(f"<action>{action}</action>", add_special_tokens=False)["input_ids"]
        ids.append(self.tokenizer.eos_token_id)
        return TokenOutput(token_ids=ids, log_probs=None, stop_reason="completed")


def step_batch(spec, step: int) -> DataProto:
    env = TwxEnv(spec.environment)
    rows = [r for r in task_rows(env.tasks("train")[:1], "twx", validation=False) for _ in range(3)]
    rows += task_rows(env.tasks("eval"), "twx", validation=True)
    return rows_batch(rows, step, uid_prefix=f"step{step}-")


def prompt_text(out, i: int, tokenizer) -> str:
    n = int(out.batch["attention_mask"][i, :PROMPT].sum())
    return tokenizer.decode(out.batch["prompts"][i, PROMPT - n :].tolist())


async def test_groups_pin_one_version_and_revisions_land_between_steps(tmp_path, local_ray):
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({"entries": [{"kind": "skill", "scope": "general", "text": "Look first."}]}))
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        "\n".join(
            [
                "name: verl-service",
                "environment: {kind: twx, game: twc, params: {numLocations: 1, numItemsToPutAway: 1},",
                "  num_train_tasks: 1, num_eval_tasks: 1, max_turns: 5}",
                "policy: {max_new_tokens: 16}",
                f"scaffold: {{initial_bank: {bank}, probe_fraction: 0, cards: [outcome, contrast, failure]}}",
                f"trainer: {{backend: verl, max_prompt_tokens: {PROMPT}, max_response_tokens: 1024,",
                "  tasks_per_step: 1, group_size: 3, gpus_per_node: 1, rollout_engine: sglang,",
                "  micro_batch_per_gpu: 1}",
                f"logging: {{root: {tmp_path / 'runs'}, wandb: disabled}}",
            ]
        )
        + "\n"
    )
    spec = load_spec(spec_file)
    run_dir = tmp_path / "run"
    cfg = composed_config(spec, tmp_path)
    _, plan = await expert_task(TwxEnv(spec.environment))
    worker = AgentLoopWorker(cfg, None)
    worker.llm_client = ScriptedServer(worker.tokenizer, plan)
    service = connect(cfg.pats.spec, cfg.pats.run_dir)

    first = await worker.generate_sequences(step_batch(spec, 1))
    v1 = set(first.non_tensor_batch["scaffold_version"][:3])
    assert len(v1) == 1 and v1 != {""}  # the group's three rollouts: one version, the seeded bank
    assert sorted(first.non_tensor_batch["success"][:3]) == [0.0, 0.0, 1.0]
    assert first.non_tensor_batch["scaffold_version"][3] == ""  # validation row
    assert HEADER not in prompt_text(first, 3, worker.tokenizer)

    second = await worker.generate_sequences(step_batch(spec, 2))
    v2 = set(second.non_tensor_batch["scaffold_version"][:3])
    assert len(v2) == 1 and v2 != v1  # the review between the steps made a new version
    text = prompt_text(second, 0, worker.tokenizer)
    # The rules reviser's family pattern from the winning rollout (the game's objects replaced by
    # their roles, so it reaches other games of the type), above the bank's general skill.
    family = text.split("Tasks of this type:\n", 1)[1].split("All tasks:", 1)[0]
    assert "How twc games were won" in family and "take <object>" in family, family
    assert not any(word in family for word in plan[1].split()[1:]), "no game's own objects"
    assert "- Look first." in text
    assert second.non_tensor_batch["scaffold_version"][3] == ""
    assert HEADER not in prompt_text(second, 3, worker.tokenizer)

    await service.wait_reviews()
    state = await service.state()
    # The second step saw version 2; its own review (the recurring task's plan beside the family
    # pattern) may have written one more.
    seen = json.loads((run_dir / "scaffold" / "versions" / "000002.json").read_text())
    assert seen["hash"] == v2.pop() and state.version in (2, 3)
    assert state.reviewed_steps == (0, 1) and state.late_reports == 0
    # Persisted like the local backend's run directory.
    assert (run_dir / "scaffold" / "versions" / f"{state.version:06d}.json").is_file()
    assert [e.step for e in read_events(run_dir / "events.jsonl", StepEndEvent)] == [0, 1]
    assert any(e.edit.scope == "type:twc" for e in read_events(run_dir / "events.jsonl", EditEvent))
    # The local engine's step metrics, in metrics.jsonl as a local run writes them.
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    for key in (
        "train/informative_fraction",
        "train/success",
        "scaffold/entries",
        "review/llm_faults",
        "edits/ADD",
    ):
        assert all(key in m for m in metrics), key
