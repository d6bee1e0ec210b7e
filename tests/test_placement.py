"""Where the scaffold is rendered (`scaffold.placement`): in the system part, or in the turn right
before the admissible actions; probes and evaluation (an empty view) see the bare prompt either way.
The local backend's prompts without a model (the prompt does not need one); verl's agent loop renders
the same turn (tests/test_verl_loop.py)."""

from __future__ import annotations

import asyncio

import pytest

from pats.backends.local.backend import LocalBackend
from pats.engine.run import make_env_factory
from pats.envs.prompting import render_prompt
from pats.episode import Episode
from pats.scaffold import place
from pats.scaffold.render import HEADER
from pats.spec import load_spec
from pats.types import EMPTY_VIEW, ScaffoldView

VIEW = ScaffoldView(
    version="v1", text=f"{HEADER}\nAll tasks:\n- Plan: take apple, put apple in fridge", tokens=20
)


@pytest.fixture(scope="module")
def episode(repo):
    spec = load_spec(repo / "experiments/quickstart.yaml", ["logging.wandb=disabled"])
    make_env = make_env_factory(spec)
    env = make_env()
    task = env.tasks("train")[0]
    state = asyncio.run(env.reset(task))
    asyncio.run(env.close())
    return spec, make_env, task, state


def prompts(episode, placement: str, view: ScaffoldView) -> tuple[str, str]:
    spec, make_env, task, state = episode
    spec = spec.model_copy(update={"scaffold": spec.scaffold.model_copy(update={"placement": placement})})
    backend = LocalBackend(spec, make_env, policy=object())  # no model: only the prompt is built
    ep = Episode("e", task, view, state=state, history=[])
    return backend.prompt_parts(ep, list(state.admissible))


def test_system_placement_appends_the_view_to_the_system_part(episode):
    system, user = prompts(episode, "system", VIEW)
    assert system.endswith("\n\n" + VIEW.text) and HEADER not in user


def test_turn_placement_puts_the_view_right_before_the_admissible_actions(episode):
    bare_system, _ = prompts(episode, "system", EMPTY_VIEW)
    system, user = prompts(episode, "turn", VIEW)
    assert system == bare_system, "the system part is the bare one: probes share it"
    blocks = user.split("\n\n")
    at = blocks.index(VIEW.text)
    assert blocks[at + 1].startswith("Admissible actions:") and blocks[at - 1].startswith("Observation:")


@pytest.mark.parametrize("placement", ["system", "turn"])
def test_an_empty_view_gives_the_bare_prompt_in_either_placement(episode, placement):
    spec, _, task, state = episode
    system, user = prompts(episode, placement, EMPTY_VIEW)
    from pats.envs.prompting import instructions

    bare = render_prompt(
        instructions("twx", spec.policy.action), state.task_description, [], state.observation,
        list(state.admissible), spec.environment.window,
    )  # fmt: skip
    assert (system, user) == (bare.system, bare.user) and HEADER not in system + user


def test_place_splits_a_view_by_placement():
    assert place(VIEW, "system") == (VIEW, "")
    assert place(VIEW, "turn") == (EMPTY_VIEW, VIEW.text)
    assert place(EMPTY_VIEW, "turn") == (EMPTY_VIEW, "")
