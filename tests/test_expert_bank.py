"""`pats expert-bank`: the training pool's whole expert plans as a bank (Stage 2's static-expert guidance)."""

from __future__ import annotations

import asyncio
import json

from pats.cli.main import main
from pats.protocols import StepResult
from pats.scaffold.bank import load_bank
from pats.scaffold.expert_bank import expert_bank
from pats.types import Task


def test_the_committed_stage2_bank_is_what_the_command_writes(repo, tmp_path):
    out = tmp_path / "bank.json"
    # Stage 2's pool is Stage 1's (twc train 0-31, 1 location, 2 items): its spec names the same games.
    assert main(["expert-bank", str(repo / "experiments/stage1/none.yaml"), "--out", str(out)]) == 0
    committed = repo / "experiments/banks/twc_pool_expert_plans.json"
    assert out.read_text() == committed.read_text()
    bank = json.loads(out.read_text())
    assert [e["scope"] for e in bank["entries"]] == [f"task:twx:twc:train:{i}" for i in range(32)]
    for e in bank["entries"]:  # whole plans, without the step that changes nothing
        assert (
            e["kind"] == "plan"
            and e["text"].startswith("Steps to try: take ")
            and "look around" not in e["text"]
        )
        assert " put " in e["text"]
    adds = load_bank(committed, task_types=["twc"])
    assert len(adds) == 32 and all(a.scope.startswith("task:") for a in adds)


class Scripted:
    """Two games: t1's expert plan wins it, t2's does not (its last step is wrong)."""

    PLANS = {"t1": ["look around", "take a", "put a in b"], "t2": ["take a", "put a in c"]}

    def __init__(self) -> None:
        self.task: Task | None = None

    def expert_plan(self, task: Task) -> list[str]:
        return self.PLANS[task.id]

    async def reset(self, task: Task) -> StepResult:
        self.task = task
        return StepResult(observation="", admissible=())

    async def step(self, action: str) -> StepResult:
        won = action == "put a in b"
        return StepResult(observation="", reward=float(won), done=won, won=won, admissible=())


def test_a_plan_that_does_not_win_its_game_is_left_out():
    tasks = [Task(id=k, type="g", split="train", env="x") for k in ("t1", "t2")]
    bank, left_out = asyncio.run(expert_bank(Scripted(), tasks))  # type: ignore[arg-type]
    assert bank == {
        "entries": [{"kind": "plan", "scope": "task:t1", "text": "Steps to try: take a -> put a in b"}]
    }
    assert left_out == ["t2"]
