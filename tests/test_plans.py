"""Plans that carry the whole path, and a "Next action" line that follows the game (issue 58, items 1-2):
`pats.scaffold.plans` on action lists, then the line on scripted episodes of a real twc game (no model)."""

from __future__ import annotations

import asyncio

import pytest

from pats.engine.run import make_env_factory
from pats.scaffold.plans import changes_nothing, next_step, plan_of, steps_done, without_detours
from pats.scaffold.render import HEADER, NEXT_LINE, PLAN_DONE_LINE, show_plans
from pats.spec import load_spec

# The quickstart's won episode the issue quotes: its second to fifth steps lead nowhere.
QUICKSTART_WIN = [
    "take clean spoon", "open trash can", "put clean spoon in counter", "open kitchen cupboard",
    "take clean spoon", "open cutlery drawer", "put clean spoon in cutlery drawer",
]  # fmt: skip


def test_a_won_sequence_loses_its_detours():
    assert plan_of(QUICKSTART_WIN) == [
        "take clean spoon",
        "open cutlery drawer",
        "put clean spoon in cutlery drawer",
    ]


def test_a_plan_keeps_every_step_that_moves_the_game():
    # Steps that change nothing go, and immediate repeats; nothing is cut, however long the path.
    gold = ["look around", "take clean brown shirt", "take clean blue T-shirt", "open wardrobe",
            "put clean brown shirt in wardrobe", "put clean blue T-shirt in wardrobe"]  # fmt: skip
    assert plan_of(gold) == gold[1:]
    assert plan_of(["inventory", "take apple", "take apple", "examine fridge", "open fridge", "put apple in fridge"]) == [
        "take apple", "open fridge", "put apple in fridge",
    ]  # fmt: skip
    long = [f"go to cabinet {i}" if i % 2 else f"take cup {i} from cabinet {i - 1}" for i in range(1, 31)]
    assert plan_of(long) == long  # 30 steps, each needed: no constant cuts it
    # An open container a later take may empty stays; an open/close pair with nothing between goes.
    assert without_detours(["open cupboard", "take spoon", "put spoon in drawer"]) == [
        "open cupboard", "take spoon", "put spoon in drawer",
    ]  # fmt: skip
    assert without_detours(["open box", "close box", "take pear", "put pear in bin"]) == [
        "take pear",
        "put pear in bin",
    ]
    # ALFWorld's moves: a 'go to' followed straight by another led nowhere.
    assert without_detours(["go to shelf 1", "go to shelf 2", "take mug 1 from shelf 2"]) == [
        "go to shelf 2", "take mug 1 from shelf 2",
    ]  # fmt: skip


def test_the_next_step_skips_what_changes_nothing_and_what_the_game_refuses_now():
    steps = ["look around", "take apple", "put apple in fridge"]
    assert (
        changes_nothing("Look around") and changes_nothing("inventory") and changes_nothing("examine apple")
    )
    assert next_step(steps, []) == "take apple"
    # 'put apple in fridge' is not admissible before the apple is held: the next admissible step is named.
    assert next_step(["put apple in fridge", "take apple"], [], ["take apple", "look around"]) == "take apple"
    # When nothing left is admissible now, the first step left is named (the game gives no better hint).
    assert next_step(steps, ["take apple"], ["inventory"]) == "put apple in fridge"
    assert next_step(steps, ["take apple", "put apple in fridge"]) is None
    # A step undone by a later action is to be taken again.
    assert steps_done(steps, ["take apple", "put apple in bin"]) == [False, False, False]
    assert next_step(steps, ["take apple", "put apple in bin"], ["take apple"]) == "take apple"


# -- scripted episodes of a real twc game -----------------------------------------------------------

GAME = ["take clean brown shirt", "take clean blue T-shirt", "open wardrobe",
        "put clean brown shirt in wardrobe", "put clean blue T-shirt in wardrobe"]  # fmt: skip


@pytest.fixture(scope="module")
def twc(repo):
    """A function that plays actions on twc train game 0 and returns the line shown before each action
    and after the last one, for the plan text given."""
    spec = load_spec(repo / "experiments/stage1/none.yaml", ["logging.wandb=disabled"])  # twc, 2 items
    make_env = make_env_factory(spec)
    env = make_env()
    task = env.tasks("train")[0]
    assert plan_of(env.expert_plan(task) or []) == GAME, "the game these episodes are scripted for"

    def play(plan: list[str], actions: list[str]) -> tuple[list[str], bool]:
        view = f"{HEADER}\nThis task:\n- Plan: Steps to try: {' -> '.join(plan)}"

        async def go() -> tuple[list[str], bool]:
            state = await env.reset(task)
            taken: list[str] = []
            lines = []
            for action in actions:
                lines.append(show_plans(view, taken, "next", state.admissible))
                assert action in state.admissible, f"scripted action {action!r} not admissible"
                state = await env.step(action)
                taken.append(action)
            lines.append(show_plans(view, taken, "next", state.admissible))
            return lines, state.won

        return asyncio.run(go())

    yield play
    asyncio.run(env.close())


def named(step: str) -> str:
    return NEXT_LINE.format(step=step)


def test_in_order_the_line_walks_the_whole_plan_then_says_it_is_done(twc):
    lines, won = twc(GAME, GAME)
    assert won
    assert lines == [named(s) for s in GAME] + [PLAN_DONE_LINE]


def test_out_of_order_a_step_already_taken_is_never_named(twc):
    order = ["take clean blue T-shirt", "take clean brown shirt", "open wardrobe",
             "put clean blue T-shirt in wardrobe", "put clean brown shirt in wardrobe"]  # fmt: skip
    lines, won = twc(GAME, order)
    assert won
    assert lines == [named("take clean brown shirt"), named("take clean brown shirt"), named("open wardrobe"),
                     named("put clean brown shirt in wardrobe"), named("put clean brown shirt in wardrobe"),
                     PLAN_DONE_LINE]  # fmt: skip


def test_after_a_detour_the_line_names_the_step_to_take_again(twc):
    detour = ["take clean brown shirt", "put clean brown shirt in bed", "take clean brown shirt"]
    lines, _ = twc(GAME, detour)
    # Putting the shirt on the bed undoes its take: the line asks for it again, then moves on.
    assert lines == [named("take clean brown shirt"), named("take clean blue T-shirt"),
                     named("take clean brown shirt"), named("take clean blue T-shirt")]  # fmt: skip


def test_a_step_never_taken_or_refused_now_does_not_hold_the_line(twc):
    # 'look around' (the gold path's first step) is never taken and never named.
    lines, _ = twc(["look around", *GAME], ["inventory", "take clean brown shirt"])
    assert lines == [named("take clean brown shirt")] * 2 + [named("take clean blue T-shirt")]
    # A plan missing 'open wardrobe': its put is refused while the wardrobe is shut, so the line
    # moves on to the next step the game accepts, and comes back once the wardrobe is open.
    gappy = ["take clean brown shirt", "put clean brown shirt in wardrobe", "take clean blue T-shirt",
             "put clean blue T-shirt in wardrobe"]  # fmt: skip
    lines, won = twc(gappy, ["take clean brown shirt", "take clean blue T-shirt", "open wardrobe",
                             "put clean brown shirt in wardrobe", "put clean blue T-shirt in wardrobe"])  # fmt: skip
    assert won
    assert lines == [named("take clean brown shirt"), named("take clean blue T-shirt"),
                     named("put clean brown shirt in wardrobe"), named("put clean brown shirt in wardrobe"),
                     named("put clean blue T-shirt in wardrobe"), PLAN_DONE_LINE]  # fmt: skip


def test_a_view_too_small_for_the_whole_plan_says_what_it_cut():
    from pats.scaffold.render import plan_steps, render_view
    from pats.types import ScaffoldEntry, Task

    task = Task(id="t1", type="twc", split="train", env="twx")
    text = "Steps to try: " + " -> ".join(GAME)
    plan = ScaffoldEntry(
        id="e1", kind="plan", scope="task:t1", text=text, tokens=0, created_step=0, updated_step=0
    )
    words = lambda s: len(s.split())  # noqa: E731  (a token is a word here)
    whole = render_view([plan], task, words, 100, "v")
    assert whole.text.endswith(text) and whole.cut_steps == 0
    cut = render_view([plan], task, words, 36, "v")
    assert cut.text.endswith("take clean brown shirt -> take clean blue T-shirt -> open wardrobe -> "
                             "... (2 more steps cut to fit the view)"), cut.text  # fmt: skip
    assert cut.cut_steps == 2 and words(cut.text) <= 36
    shown = plan_steps(cut.text.split("- Plan: ")[1])
    assert shown is not None and shown.more and shown.cut == 2 and len(shown.steps) == 3
    # Once the shown steps are taken, the line does not claim the plan is done.
    assert show_plans(cut.text, GAME[:3], "next").startswith("Next action: not shown")


def test_every_verb_of_the_grammar_counts_and_each_detour_rule_drops_only_its_own_steps():
    """Each rule of `without_detours` on the case that tells it from a near miss (found by mutation
    testing: each assertion fails on a mutant the other tests let through)."""
    # the short observation verbs and every take/put verb of the grammar
    assert all(changes_nothing(a) for a in ("l", "i", "x mug 1", "look", "inventory", "examine desk"))
    assert without_detours(["put apple in fridge", "pick apple", "put apple in basket"]) == [
        "put apple in basket"
    ]
    for verb in ("drop", "place", "insert"):
        steps = [f"{verb} apple in fridge", "take apple", "put apple in basket"]
        assert without_detours(steps) == ["put apple in basket"], verb
    # a take of another object undoes nothing; nor does a take after a step that used the object
    kept = ["put apple in fridge", "take pear", "put pear in basket"]
    assert without_detours(kept) == kept
    kept = ["put apple in fridge", "slice apple", "take apple", "put apple in basket"]
    assert without_detours(kept) == kept
    # an open that nothing later needs is dropped, also just before the last step
    assert without_detours(["take apple", "open drawer", "put apple in fridge"]) == [
        "take apple", "put apple in fridge"
    ]  # fmt: skip
    # ... unless a later take (without a source) may take a new object out of it; taking again an
    # object taken before the open is no such take
    again = [
        "take apple",
        "put apple in basket",
        "slice apple",
        "open drawer",
        "take apple",
        "put apple in fridge",
    ]
    assert without_detours(again) == [s for s in again if s != "open drawer"]
    new = ["take pear", "slice apple", "open drawer", "take apple", "put apple in fridge"]
    assert without_detours(new) == new
