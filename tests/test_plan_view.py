"""How a turn shows the view's plans (`scaffold.plan_view`): static as written, progress with the steps
taken marked, next as one "Next action:" line; the local backend's prompts on a real twc game (no
model needed to build a prompt). verl's agent loop renders the same turns (tests/test_verl_loop.py)."""

from __future__ import annotations

import asyncio

import pytest

from pats.backends.local.backend import LocalBackend
from pats.engine.run import make_env_factory
from pats.episode import Act, Episode
from pats.errors import SpecError
from pats.scaffold import place
from pats.scaffold.plans import changes_nothing, steps_done
from pats.scaffold.render import HEADER, PLAN_DONE_LINE, plan_steps, show_plans
from pats.spec import load_spec
from pats.types import EMPTY_VIEW, ScaffoldView

PLAN = (
    "- Plan: Steps to try: look around -> take apple -> put apple in fridge -> take pear -> put pear in box"
)
VIEW_TEXT = f"{HEADER}\nThis task:\n{PLAN}\nAll tasks:\n- Look first.\n- Avoid: eating things."


def test_static_is_the_very_same_text():
    assert show_plans(VIEW_TEXT, ["look around", "take apple"], "static") is VIEW_TEXT
    assert show_plans("", ["look around"], "next") == ""


def test_progress_marks_the_steps_taken_and_names_the_next():
    shown = show_plans(VIEW_TEXT, ["look around", "inventory", "take apple"], "progress")
    assert shown.split("\n")[2] == (
        "- Plan: Steps to try: look around [done] -> take apple [done] -> put apple in fridge [next] "
        "-> take pear -> put pear in box"
    )
    assert (
        shown.split("\n")[:2] + shown.split("\n")[3:] == VIEW_TEXT.split("\n")[:2] + VIEW_TEXT.split("\n")[3:]
    )
    nothing = show_plans(VIEW_TEXT, [], "progress").split("\n")[2]
    assert nothing == PLAN.replace("take apple", "take apple [next]"), "'look around' changes nothing"


def test_next_is_one_line_with_the_exact_next_step():
    assert show_plans(VIEW_TEXT, [], "next") == "Next action: take apple"  # not 'look around'
    assert show_plans(VIEW_TEXT, ["look around"], "next") == "Next action: take apple"
    assert show_plans(VIEW_TEXT, ["look around", "take apple"], "next") == "Next action: put apple in fridge"


def test_a_step_taken_out_of_order_is_done_and_never_named_next():
    # twc lets the items go away in any order: after taking both, the next step is putting the apple.
    taken = ["look around", "take pear", "take apple"]
    assert steps_done(["look around", "take apple", "put apple in fridge", "take pear"], taken) == [
        True, True, False, True,
    ]  # fmt: skip
    assert show_plans(VIEW_TEXT, taken, "next") == "Next action: put apple in fridge"
    # A repeated step needs the action twice; case and spacing do not matter.
    assert steps_done(["go east", "go west", "go east"], ["Go  East", "go west"]) == [True, True, False]


def test_when_every_step_is_done_next_says_so_above_the_rest_of_the_view():
    taken = ["take apple", "put apple in fridge", "take pear", "put pear in box"]  # 'look around' never
    assert (
        show_plans(VIEW_TEXT, taken, "next")
        == f"{PLAN_DONE_LINE}\n{HEADER}\nAll tasks:\n- Look first.\n- Avoid: eating things."
    )
    only_plan = f"{HEADER}\nThis task:\n{PLAN}"
    assert show_plans(only_plan, taken, "next") == PLAN_DONE_LINE
    assert (
        changes_nothing("look around")
        and changes_nothing("examine fridge")
        and not changes_nothing("take pear")
    )
    assert "[next]" not in show_plans(VIEW_TEXT, taken, "progress")


def test_plans_that_are_not_step_lists_are_shown_as_written():
    free = f"{HEADER}\nThis task:\n- Plan: open the fridge first, then take the milk"
    assert plan_steps("open the fridge first, then take the milk") is None
    assert show_plans(free, ["open fridge"], "progress") == free
    assert show_plans(free, [], "next") == free  # no step list: nothing to name, the view stays
    cut = plan_steps("Steps to try: a -> b -> ...")
    assert cut is not None and cut.steps == ("a", "b") and cut.more and cut.label == "Steps to try: "
    shown = show_plans(f"{HEADER}\nThis task:\n- Plan: Steps to try: a -> b -> ...", ["a"], "progress")
    assert shown.endswith("- Plan: Steps to try: a [done] -> b [next] -> ...")
    assert plan_steps("take apple -> put apple in fridge").label == ""


def test_progress_needs_the_turn_placement():
    view = ScaffoldView(version="v", text=VIEW_TEXT, tokens=40)
    assert place(view, "turn", "next", ["take apple"]) == (EMPTY_VIEW, "Next action: put apple in fridge")
    assert place(view, "system", "static", ["look around"]) == (view, "")
    with pytest.raises(ValueError, match="placement 'turn'"):
        place(view, "system", "progress")


def test_the_spec_refuses_progress_in_the_system_part(repo):
    with pytest.raises(SpecError, match="placement: turn"):
        load_spec(
            repo / "experiments/quickstart.yaml", ["scaffold.plan_view=progress", "scaffold.placement=system"]
        )
    spec = load_spec(
        repo / "experiments/quickstart.yaml", ["scaffold.plan_view=next", "scaffold.placement=turn"]
    )
    assert spec.scaffold.plan_view == "next"


# -- the local backend's turns on a real game ------------------------------------------------------


@pytest.fixture(scope="module")
def game(repo):
    spec = load_spec(
        repo / "experiments/quickstart.yaml", ["logging.wandb=disabled", "scaffold.placement=turn"]
    )
    make_env = make_env_factory(spec)
    env = make_env()
    task = env.tasks("train")[0]
    plan = list(env.expert_plan(task) or [])
    asyncio.run(env.close())
    assert len(plan) >= 3
    return spec, make_env, task, plan


def turns_shown(game, plan_view: str, view_text: str, invalid_first: bool = False) -> list[str]:
    """The user part of every turn of an episode that plays the expert plan (after one invalid turn)."""
    spec, make_env, task, plan = game
    scaffold = spec.scaffold.model_copy(update={"plan_view": plan_view})
    backend = LocalBackend(spec.model_copy(update={"scaffold": scaffold}), make_env, policy=object())
    view = ScaffoldView(version="v", text=view_text, tokens=40) if view_text else EMPTY_VIEW
    env = make_env()

    async def play() -> list[str]:
        ep = Episode("e", task, view)
        await ep.reset(env.reset)
        users = []
        if invalid_first:  # a wrong action that reads like the second step: not taken, not done
            users.append(backend.prompt_parts(ep, list(ep.state.admissible))[1])
            await ep.step(Act(plan[1], plan[1], valid=False, reason="not now"), env.step)
        for action in plan:
            users.append(backend.prompt_parts(ep, list(ep.state.admissible))[1])
            await ep.step(Act(action, action), env.step)
        await env.close()
        return users

    return asyncio.run(play())


def test_the_local_backend_names_each_next_step_as_the_episode_takes_them(game):
    plan = game[3]
    text = f"{HEADER}\nThis task:\n- Plan: Steps to try: {' -> '.join(plan)}"
    users = turns_shown(game, "next", text, invalid_first=True)
    assert users[0].split("\n\n")[-2] == users[1].split("\n\n")[-2], "an invalid turn takes no step"
    assert changes_nothing(plan[0]), "twc's gold path opens with 'look around', a step that changes nothing"
    for k, user in enumerate(users[1:]):
        blocks = user.split("\n\n")
        upcoming = next(s for s in plan[k:] if not changes_nothing(s))  # never 'look around'
        assert blocks[-2] == f"Next action: {upcoming}" and blocks[-1].startswith("Admissible actions:")
        assert HEADER not in user
    progress = turns_shown(game, "progress", text)
    for k, user in enumerate(progress):
        upcoming = next(s for s in plan[k:] if not changes_nothing(s))
        assert user.count("[done]") == k and f"{upcoming} [next]" in user and HEADER in user


def test_without_a_scaffold_every_plan_view_gives_the_bare_prompt(game):
    bare = turns_shown(game, "static", "")
    assert turns_shown(game, "progress", "") == bare and turns_shown(game, "next", "") == bare
    assert not any("Next action" in u or HEADER in u for u in bare)


def test_an_expert_state_replayed_from_history_counts_its_history_as_taken():
    ep = Episode("gap", task=None, view=EMPTY_VIEW, history=[("look around", "..."), ("take apple", "...")])
    assert ep.actions_taken() == ["look around", "take apple"]
