"""The response-likelihood gap on the real policy and real games: expert pairs replay to a win, the
gap is exactly 0 with no scaffold, and the task's own expert plan in the prompt makes the expert's
actions more likely (a positive gap)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from pats.backends.local.backend import LocalBackend
from pats.backends.local.reliance import LikelihoodGap, action_distributions, expert_pairs
from pats.engine.run import make_env_factory
from pats.episode import Episode
from pats.reviser.rules import key_actions
from pats.scaffold.render import render_view
from pats.spec import load_spec
from pats.types import EMPTY_VIEW, ScaffoldEntry

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(repo):
    spec = load_spec(repo / "experiments/quickstart.yaml", ["logging.wandb=disabled"])
    make_env = make_env_factory(spec)
    env = make_env()
    tasks = env.tasks("train")[:2]
    pairs = asyncio.run(expert_pairs(env, tasks))
    plans = {t.id: env.expert_plan(t) for t in tasks}
    asyncio.run(env.close())
    return LocalBackend(spec, make_env), tasks, pairs, plans


def test_pairs_follow_winning_expert_plans(setup):
    _, tasks, pairs, plans = setup
    assert {p.task.id for p in pairs} == {t.id for t in tasks}
    for task in tasks:
        mine = [p for p in pairs if p.task.id == task.id]
        assert [p.action for p in mine] == list(plans[task.id])
        assert all(p.action in p.state.admissible for p in mine)
        assert [h[0] for h in mine[-1].history] == list(plans[task.id])[:-1]


def test_gap_is_zero_without_guidance_and_positive_with_the_plan(setup, count_tokens):
    backend, tasks, pairs, plans = setup
    gap = LikelihoodGap(backend, pairs)
    empty = gap.measure(lambda task: EMPTY_VIEW)
    assert empty["eval/likelihood_gap"] == 0.0 and empty["eval/expert_pairs"] == len(pairs)

    def own_plan(task):
        text = "Steps to try: " + key_actions(plans[task.id])
        entry = ScaffoldEntry(id="p", kind="plan", scope=f"task:{task.id}", text=text, tokens=count_tokens(text),
                              created_step=0, updated_step=0)  # fmt: skip
        return render_view([entry], task, count_tokens, 400, "v")

    # Without a scaffold (scaffold.mode: none) only the no-scaffold NLL: the same number.
    alone = gap.measure(None)
    assert alone == {"eval/expert_nll": empty["eval/expert_nll"], "eval/expert_pairs": float(len(pairs))}

    guided = gap.measure(own_plan)
    assert guided["eval/expert_nll"] == pytest.approx(empty["eval/expert_nll"])
    assert guided["eval/likelihood_gap"] > 0, guided


def test_a_jvm_dying_in_the_replay_leaves_out_that_task_only(repo, kill_jvm_on_step):
    spec = load_spec(repo / "experiments/quickstart.yaml", ["logging.wandb=disabled"])
    env = make_env_factory(spec)()
    tasks = env.tasks("train")[:2]
    kill_jvm_on_step(2)  # the first task's second expert action
    try:
        pairs = asyncio.run(expert_pairs(env, tasks))
    finally:
        asyncio.run(env.close())
    assert {p.task.id for p in pairs} == {tasks[1].id}, "the second task replays on a restarted JVM"
    assert [p.action for p in pairs] == list(env.expert_plan(tasks[1]))


def test_the_gap_scores_as_the_policy_acts_without_batching(repo, setup, monkeypatch):
    """With `trainer.rollout_batching: false` the policy scores one decision at a time on the whole
    prompt; the gap reads that same distribution (equal to the acting path's, number for number), not
    the packed batch's, which agrees only to rounding."""
    _, _, pairs, _ = setup
    spec = load_spec(
        repo / "experiments/quickstart.yaml", ["logging.wandb=disabled", "trainer.rollout_batching=false"]
    )
    backend = LocalBackend(spec, make_env_factory(spec))
    packed = []
    real = backend.policy.score_batch_actions
    monkeypatch.setattr(
        backend.policy, "score_batch_actions", lambda *args, **kw: packed.append(1) or real(*args, **kw)
    )
    got = action_distributions(backend, pairs, [EMPTY_VIEW] * len(pairs))
    assert packed == []
    for pair, probs in zip(pairs, got, strict=True):
        episode = Episode("acting", pair.task, EMPTY_VIEW, state=pair.state, history=list(pair.history))
        acts = list(pair.state.admissible)
        _, acting = backend.policy.choose(backend.prompt_ids(episode, acts), acts, greedy=True)
        assert torch.equal(probs.float(), acting)
