"""A bank of the training pool's own expert plans: the guidance a `static-expert` baseline shows.

`pats expert-bank SPEC --out FILE` writes, for every game of the spec's training pool (the first
`environment.num_train_tasks` of its train fold), one task-scoped plan in pats' bank format
({"entries": [{kind, scope, text}]}, pats.scaffold.bank): the game's whole expert plan as the rules
reviser writes one from the expert card ("Steps to try: " + the steps that move the game,
pats.scaffold.plans.plan_of). Each plan is replayed first and kept only if it wins its game, so the
bank holds no plan that does not work. A spec then starts from it with `scaffold.initial_bank`
(mode static: shown from step 0, never edited; mode pats: delivered, then revised and removed).

Privileged: the plans come from the environment's expert (as the `expert` card does); a run that
starts from such a bank says so in its spec, and none of it is shown at evaluation.
"""

from __future__ import annotations

from pats.protocols import Env
from pats.scaffold.plans import key_actions, plan_of
from pats.types import Task

PLAN_LABEL = "Steps to try: "  # the rules reviser's label for a plan from the expert card


async def expert_bank(env: Env, tasks: list[Task]) -> tuple[dict, list[str]]:
    """(the bank, the ids of tasks left out: no expert plan, or one whose replay does not win)."""
    entries, left_out = [], []
    for task in tasks:
        plan = list(env.expert_plan(task) or [])
        if not plan or not await _wins(env, task, plan):
            left_out.append(task.id)
            continue
        text = PLAN_LABEL + key_actions(plan_of(plan))
        entries.append({"kind": "plan", "scope": f"task:{task.id}", "text": text})
    return {"entries": entries}, left_out


async def _wins(env: Env, task: Task, plan: list[str]) -> bool:
    await env.reset(task)
    won = False
    for action in plan:
        won = won or (await env.step(action)).won
    return won
