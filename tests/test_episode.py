"""The episode rules both trainers share (pats.episode): parsing, invalid turns, faults, the record."""

from __future__ import annotations

import asyncio

from pats.episode import Act, Episode, read_output
from pats.errors import EnvironmentFault
from pats.testing import FakeEnv
from pats.types import EMPTY_VIEW


def play(env, acts: list[Act], task=None) -> Episode:
    task = task or env.tasks("train")[0]
    ep = Episode("e0", task, EMPTY_VIEW)

    async def go():
        await ep.reset(env.reset)
        for act in acts:
            if ep.done:
                break
            await ep.step(act, env.step)

    asyncio.run(go())
    return ep


def test_an_expert_episode_wins_and_records_every_turn():
    env = FakeEnv()
    task = env.tasks("train")[0]
    plan = env.expert_plan(task)
    ep = play(env, [Act(a, f"> {a}", prompt_tokens=50, response_tokens=3) for a in ["look", *plan]], task)
    rollout = ep.record(scaffolded=False)
    assert rollout.success and rollout.reward == 1.0 and not rollout.truncated and not rollout.error
    assert [t.action for t in rollout.turns] == ["look", *plan]
    assert [t.output for t in rollout.turns][0] == "> look" and rollout.turns[0].prompt_tokens == 50
    assert ep.history[0] == ("look", "You did: look.")


def test_an_output_naming_no_action_is_an_invalid_turn_that_never_reaches_the_environment():
    env = FakeEnv()
    task = env.tasks("train")[0]
    steps = []

    async def step(action):
        steps.append(action)
        return await env.step(action)

    ep = Episode("e1", task, EMPTY_VIEW)
    admissible = None

    async def go():
        nonlocal admissible
        await ep.reset(env.reset)
        admissible = list(ep.state.admissible)
        await ep.step(read_output("I will dance a jig", admissible, parses_output=False), step)

    asyncio.run(go())
    (turn,) = ep.turns
    assert not turn.valid and turn.invalid_reason and steps == []
    assert ep.state.admissible == tuple(admissible), "the admissible actions carry over an invalid turn"
    assert not ep.done and not ep.record(scaffolded=True).success


def test_free_text_environments_receive_the_whole_output():
    act = read_output("  <search>who wrote it</search>  ", None, parses_output=True, response_tokens=7)
    assert act == Act("<search>who wrote it</search>", "  <search>who wrote it</search>  ", response_tokens=7)


def test_an_environment_fault_ends_the_episode_with_its_error():
    env = FakeEnv()

    async def dying(action):
        raise EnvironmentFault("JVM gone")

    ep = Episode("e2", env.tasks("train")[0], EMPTY_VIEW)

    async def go():
        await ep.reset(env.reset)
        await ep.step(Act("look", "look"), dying)

    asyncio.run(go())
    rollout = ep.record(scaffolded=False)
    assert ep.done and "environment died: JVM gone" in rollout.error and not rollout.turns[0].valid

    async def no_reset(task):
        raise EnvironmentFault("no game file")

    broken = Episode("e3", env.tasks("train")[0], EMPTY_VIEW)
    asyncio.run(broken.reset(no_reset))
    assert broken.done and broken.error == "reset failed: no game file" and broken.state.observation == ""
