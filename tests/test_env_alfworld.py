"""AlfworldEnv on the real ALFWorld games of ../shared/data/alfworld (valid_seen, 140 games).

The game tests start real textworld processes (~2 s each on a loaded 2-core machine); the data tests
need no textworld. Without textworld/alfworld installed, the game tests skip (fail under CI=true).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time

import pytest

from pats.envs.alfworld import AlfworldEnv, data, split_intro
from pats.envs.alfworld import env as alfworld_env
from pats.envs.prompting import instructions, parse_action, render_prompt
from pats.errors import EnvironmentFault, PrerequisiteError
from pats.protocols import Env
from pats.registry import ENVIRONMENTS
from pats.spec.environments import ALFWORLD_TASK_TYPES, AlfworldEnvSpec

pytestmark = pytest.mark.slow  # real games in real processes (still CPU, still in CI)

VALID_SEEN_GAMES = 140  # json_2.1.1/valid_seen of ALFWorld (see ../shared/data/SOURCES.md)


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    """One unpacked copy per test session, never the user's ~/.cache."""
    monkeypatch.setenv("PATS_CACHE", str(tmp_path_factory.getbasetemp() / "pats-cache"))
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)


@pytest.fixture
def valid_seen(shared_data):
    tarball = shared_data / "alfworld" / "json_2.1.1_valid_seen.tar.xz"
    if not tarball.is_file():
        pytest.fail(f"{tarball} missing from the shared data")
    return tarball


@pytest.fixture
def textworld_installed():
    missing = [p for p in ("textworld", "alfworld") if importlib.util.find_spec(p) is None]
    if missing:
        message = f"{', '.join(missing)} not installed: {alfworld_env.INSTALL}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def make(tarball, **kw) -> AlfworldEnv:
    kw = {"data_dir": str(tarball), "train_split": "valid_seen", "eval_split": "valid_seen", **kw}
    return AlfworldEnv(AlfworldEnvSpec(**kw))


# -- data and tasks (no textworld needed) ---------------------------------------------------------


def test_registered_and_satisfies_the_protocol(valid_seen):
    env = ENVIRONMENTS.get("alfworld")(AlfworldEnvSpec(data_dir=str(valid_seen)))
    assert isinstance(env, AlfworldEnv) and isinstance(env, Env)


def test_tasks_are_fixed_seeded_and_typed(valid_seen):
    env = make(valid_seen, num_eval_tasks=VALID_SEEN_GAMES, num_train_tasks=12)
    full = env.tasks("eval")
    assert len(full) == VALID_SEEN_GAMES and len({t.id for t in full}) == VALID_SEEN_GAMES
    assert {t.type for t in full} == set(ALFWORLD_TASK_TYPES)
    for task in full:
        assert task.env == "alfworld" and task.split == "eval"
        assert task.id == f"alfworld:valid_seen:{task.payload['game']}"
        assert task.payload["game"].startswith(task.type + "-") and "/trial_" in task.payload["game"]
    # Fixed: a new instance lists the same tasks; seeded: another seed, another order; capped.
    assert [t.id for t in make(valid_seen, num_eval_tasks=VALID_SEEN_GAMES).tasks("eval")] == [
        t.id for t in full
    ]
    assert [t.id for t in make(valid_seen, num_eval_tasks=VALID_SEEN_GAMES, task_seed=1).tasks("eval")] != [
        t.id for t in full
    ]
    assert [t.id for t in env.tasks("train")] == [t.id for t in full[:12]]
    assert full != sorted(full, key=lambda t: t.id)  # shuffled, so a small sample spans task types
    only = make(valid_seen, task_types=("pick_heat_then_place_in_recep",), num_eval_tasks=500).tasks("eval")
    assert len(only) == 16 and {t.type for t in only} == {"pick_heat_then_place_in_recep"}
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        env.tasks("dev")


def test_every_form_of_data_dir_finds_the_same_games(valid_seen):
    ids = [t.id for t in make(valid_seen).tasks("eval")]
    unpacked = data.unpack(valid_seen)  # cached: the second call does not unpack again
    assert data.unpack(valid_seen) == unpacked and (unpacked / "json_2.1.1" / "valid_seen").is_dir()
    for source in (valid_seen.parent, unpacked, unpacked / "json_2.1.1"):
        assert [t.id for t in make(source).tasks("eval")] == ids, source


def test_missing_data_and_missing_split_say_what_to_do(valid_seen, monkeypatch, tmp_path):
    with pytest.raises(PrerequisiteError, match=r"ALFWORLD_DATA.*alfworld-download"):
        AlfworldEnv(AlfworldEnvSpec()).tasks("eval")
    with pytest.raises(PrerequisiteError, match="does not exist"):
        AlfworldEnv(AlfworldEnvSpec(data_dir=str(tmp_path / "nowhere"))).tasks("eval")
    monkeypatch.setenv("ALFWORLD_DATA", str(valid_seen))  # $ALFWORLD_DATA when data_dir is unset
    assert len(AlfworldEnv(AlfworldEnvSpec(eval_split="valid_seen", num_eval_tasks=3)).tasks("eval")) == 3
    with pytest.raises(PrerequisiteError, match=r"split 'valid_unseen' not found.*found: valid_seen"):
        make(valid_seen, eval_split="valid_unseen").tasks("eval")


def test_split_intro():
    intro = (
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around "
        "you, you see a desk 1.\n\nYour task is to: look at alarmclock under the desklamp."
    )
    assert split_intro(intro) == (
        "look at alarmclock under the desklamp.",
        "You are in the middle of a room. Looking quickly around you, you see a desk 1.",
    )
    assert split_intro("You see a desk 1.") == ("", "You see a desk 1.")


# -- real games ----------------------------------------------------------------------------------


def two_per_type(env: AlfworldEnv):
    tasks = env.tasks("eval")
    return [t for kind in ALFWORLD_TASK_TYPES for t in [t for t in tasks if t.type == kind][:2]]


async def replay(env: AlfworldEnv, tasks) -> list[tuple[str, bool, list[float], float, float]]:
    """Play each task's walkthrough: (type, won, rewards, reset seconds, seconds per step)."""
    out = []
    for task in tasks:
        start = time.perf_counter()
        first = await env.reset(task)
        reset_s = time.perf_counter() - start
        assert first.task_description and "Welcome" not in first.observation and not first.done
        plan = env.expert_plan(task)
        assert plan and all(isinstance(a, str) for a in plan)
        rewards, results, start = [], [], time.perf_counter()
        for action in plan:
            result = await env.step(action)
            assert result.valid, (task.id, action, result.invalid_reason)
            rewards.append(result.reward)
            results.append(result)
        step_s = (time.perf_counter() - start) / len(plan)
        assert not any(r.done for r in results[:-1])
        out.append((task.type, results[-1].won and results[-1].done, rewards, reset_s, step_s))
    return out


async def test_walkthroughs_win_two_games_of_every_type_on_parallel_envs(valid_seen, textworld_installed):
    envs = [make(valid_seen, num_eval_tasks=VALID_SEEN_GAMES) for _ in range(3)]
    tasks = two_per_type(envs[0])
    assert len(tasks) == 12
    try:
        start = time.perf_counter()
        runs = await asyncio.gather(*(replay(env, tasks[i::3]) for i, env in enumerate(envs)))
        wall = time.perf_counter() - start
    finally:
        await asyncio.gather(*(env.close() for env in envs))
    games = [game for run in runs for game in run]
    wins = {kind: sum(won for k, won, *_ in games if k == kind) for kind in ALFWORLD_TASK_TYPES}
    print(f"\nwalkthrough wins {wins}; wall {wall:.1f} s for 12 games on 3 processes")
    print("reset s", [round(g[3], 2) for g in games], "step s", [round(g[4], 3) for g in games])
    assert wins == dict.fromkeys(ALFWORLD_TASK_TYPES, 2)
    for _, _, rewards, *_ in games:
        assert rewards[-1] == 1.0 and sum(rewards) == 1.0  # 1.0 on the winning step only
    assert len({env.pid for env in envs}) == 1  # all closed (None)


@pytest.fixture
def game_env(valid_seen, textworld_installed):
    env = make(valid_seen, num_eval_tasks=VALID_SEEN_GAMES)
    yield env
    asyncio.run(env.close())


async def test_bad_actions_are_invalid_with_a_reason_and_change_nothing(game_env):
    task = next(t for t in game_env.tasks("eval") if t.type == "pick_and_place_simple")
    first = await game_env.reset(task)
    # Its own process group: a Ctrl-C to the run must not kill the game under the step in flight.
    assert os.getpgid(game_env.pid) != os.getpgid(0)
    assert first.admissible == tuple(sorted(first.admissible)) and "help" not in first.admissible
    assert "look" in first.admissible and any(a.startswith("go to ") for a in first.admissible)
    cases = {
        "": "empty action",
        "   \n ": "empty action",
        "x" * 500: "over-long action",
        "dance wildly": "'dance wildly' is not an admissible action",
        "<action>look</action>": "is not an admissible action",  # the env gets one action, not markup
        "go to the moon": "not an admissible action",
    }
    for action, reason in cases.items():
        result = await game_env.step(action)
        assert not result.valid and reason in result.invalid_reason, (action, result.invalid_reason)
        assert result.reward == 0.0 and not result.done
        assert (result.observation, result.admissible) == (first.observation, first.admissible)
    plan = game_env.expert_plan(task)
    spaced = "  " + plan[0].upper().replace(" ", "   ") + " "  # case and spacing are forgiven
    moved = await game_env.step(spaced)
    assert moved.valid and moved.observation != first.observation
    for action in plan[1:]:
        last = await game_env.step(action)
    assert last.won and last.done
    with pytest.raises(RuntimeError, match="ended"):
        await game_env.step("look")
    # The same game again starts from the same state (the worker reuses the loaded game).
    again = await game_env.reset(task)
    assert (again.observation, again.admissible, again.won) == (first.observation, first.admissible, False)
    for action in plan:
        last = await game_env.step(action)
    assert last.won and last.reward == 1.0 and game_env.process_starts == 1


async def test_policy_output_goes_through_the_prompt_and_the_parser(game_env):
    task = game_env.tasks("eval")[0]
    state = await game_env.reset(task)
    parts = render_prompt(
        instructions("alfworld", "generate"),
        state.task_description,
        [],
        state.observation,
        state.admissible,
        2,
    )
    assert f"Task: {state.task_description}" in parts.system and "<action>" in parts.system
    assert "Admissible actions: " in parts.user and state.observation in parts.user
    plan = game_env.expert_plan(task)
    action, valid, _ = parse_action(f"<action>{plan[0]}</action>", state.admissible)
    assert valid and (await game_env.step(action)).valid
    for garbage in ("", "!!!", "a" * 1000):
        action, valid, reason = parse_action(garbage, state.admissible)
        assert not valid and reason


async def test_a_dead_game_process_fails_the_episode_and_the_next_reset_recovers(game_env):
    tasks = game_env.tasks("eval")[:2]
    await game_env.reset(tasks[0])
    first_pid = game_env.pid
    os.kill(first_pid, signal.SIGKILL)
    plan = game_env.expert_plan(tasks[0])
    with pytest.raises(EnvironmentFault, match="died during"):
        await game_env.step(plan[0])
    with pytest.raises(EnvironmentFault, match="reset"):  # the episode stays failed
        await game_env.step(plan[0])
    assert game_env.pid is None
    state = await game_env.reset(tasks[1])
    assert state.admissible and game_env.pid not in (None, first_pid) and game_env.process_starts == 2
    # Killed between episodes: the reset itself notices and starts a new process.
    os.kill(game_env.pid, signal.SIGKILL)
    time.sleep(0.2)
    state = await game_env.reset(tasks[1])
    assert state.admissible and game_env.process_starts == 3
    assert (await game_env.step(game_env.expert_plan(tasks[1])[0])).valid


async def test_missing_packages_name_the_install_command(valid_seen, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "textworld" else real(name, *a)
    )
    env = make(valid_seen)
    try:
        with pytest.raises(PrerequisiteError, match=r"pip install alfworld==0\.4\.2"):
            await env.reset(env.tasks("eval")[0])
    finally:
        await env.close()
