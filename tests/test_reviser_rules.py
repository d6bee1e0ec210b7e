"""The rules reviser: guidance for failing types, removal for solved ones, and valid edit sets always."""

from __future__ import annotations

import pytest

from pats.protocols import Reviser
from pats.reviser import RulesReviser, validate_edits
from pats.spec.models import ScaffoldBudget
from pats.testing import evidence_card
from pats.types import (
    AddEdit,
    Assessment,
    DeleteEdit,
    EvidenceCard,
    ReviewMode,
    ScaffoldEntry,
    ScopeSuccess,
    Verdict,
)

E, R, C, P = ReviewMode.EXPAND, ReviewMode.REVISE, ReviewMode.COMPRESS, ReviewMode.PRUNE
MODES = [E, R, C, P]


def card(task_id: str, type_: str, facts: dict, task_type: str = "twc") -> EvidenceCard:
    """A card with the given facts; the rest are an empty group's (pats.testing.card_facts)."""
    return evidence_card(task_id, type_, task_type, step=3, privileged=type_ == "expert", **facts)


def outcome(task_id: str, rate: float, task_type: str = "twc") -> EvidenceCard:
    data = {"n": 4, "success_rate": rate, "all_failed": rate == 0, "all_passed": rate == 1}
    return card(task_id, "outcome", data, task_type)


def contrast(task_id: str, best_actions: list[str], best_success: bool = True, task_type: str = "twc"):
    best = {"rollout_id": "r0", "reward": 1.0, "success": best_success, "turns": 5, "actions": best_actions}
    worst = {"rollout_id": "r1", "reward": 0.0, "success": False, "turns": 9, "actions": ["look around"]}
    return card(task_id, "contrast", {"best": best, "worst": worst}, task_type)


def failure(task_id: str, counts: dict[str, int], examples: list[dict]) -> EvidenceCard:
    return card(task_id, "failure", {"counts": counts, "examples": examples, "failed_rollouts": 4})


def utility(task_id: str, delta: float, with_: float = 0.0, without: float = 0.0, n_with=3, n_without=1):
    data = {"n_with": n_with, "n_without": n_without, "success_with": with_, "success_without": without}
    return card(task_id, "utility", data | {"delta": delta})


def entry(id: str, scope: str, text: str, kind: str = "skill", step: int = 0, tokens: int = 10):
    return ScaffoldEntry(
        id=id, kind=kind, scope=scope, text=text, tokens=tokens, created_step=step, updated_step=step
    )


def assess(mode: ReviewMode, task_type: str = "twc") -> Assessment:
    return Assessment(task_type=task_type, mode=mode, ema_success=0.5, pressure=0.5)


WASHER = ["take shirt", "take shirt", "open washer", "put shirt in washer", "put shirt in washer"]
MIXED = [outcome("t1", 0.5), contrast("t1", WASHER)]
REPEATS = [
    outcome("t2", 0.0),
    contrast("t2", ["look around"], best_success=False),
    failure(
        "t2",
        {"repeated_action": 3, "loop": 1, "invalid_action": 0},
        [{"mode": "loop", "rollout_id": "r2", "turn": 4, "excerpt": "go north | go south (x2)"},
         {"mode": "repeated_action", "rollout_id": "r1", "turn": 2, "excerpt": "look around (x3)"}],
    ),
]  # fmt: skip
PLAN_T1 = "Steps that worked: take shirt -> open washer -> put shirt in washer"
REPEAT_MISTAKE = "Do not repeat 'look around': if an action changed nothing, try a different one."
FAMILY_T1 = (
    "How twc games were won (the pattern of 1 of 1 games, from 1 won episode; <object> and <place> stand "
    "for this game's own): "
    "take <object> -> open <object> -> put <object> in <place>"
)


@pytest.fixture
def valid(count_tokens):
    """Assert that an edit set passes validation for the reviser's settings, and return it."""

    def _valid(edits, mode, cards, entries, *, removal=True, min_citations=2, task_type="twc"):
        problems = validate_edits(
            edits,
            mode,
            entries,
            cards,
            count_tokens,
            removal=removal,
            min_citations=min_citations,
            task_type=task_type,
            plans_per_review=0,
        )
        assert problems == [], problems
        return edits

    return _valid


def test_satisfies_the_reviser_protocol():
    assert isinstance(RulesReviser(removal=True, min_citations=2), Reviser)


async def test_family_pattern_and_plan_from_a_mixed_group(valid):
    edits = await RulesReviser(True, 2).revise(3, assess(E), MIXED, [])
    assert edits == [
        AddEdit(kind="skill", scope="type:twc", text=FAMILY_T1, cites=("c3-t1-outcome", "c3-t1-contrast")),
        AddEdit(kind="plan", scope="task:t1", text=PLAN_T1, cites=("c3-t1-contrast", "c3-t1-outcome")),
    ]
    valid(edits, E, MIXED, [])


async def test_plans_without_the_contrast_card():
    """The contrast ablation must not turn plans off: the outcome card carries the winning actions."""
    won = card("t1", "outcome", {"n": 4, "success_rate": 0.5, "winning_actions": WASHER})
    edits = await RulesReviser(True, 2).revise(3, assess(E), [won, utility("t1", 0.0)], [])
    assert [(e.kind, e.scope, e.text) for e in edits] == [
        ("skill", "type:twc", FAMILY_T1),
        ("plan", "task:t1", PLAN_T1),
    ]


async def test_type_scoped_guidance_names_no_object_of_a_single_game(valid):
    """Three games with their own objects and one shared container: every type-scoped ADD keeps the
    shared word and none of the words that belong to one game."""
    games = {
        "t1": ["take red shirt", "open wardrobe", "put red shirt in wardrobe"],
        "t2": ["take black pepper", "put black pepper in shelf"],
        "t3": ["take long coat", "open wardrobe", "put long coat in wardrobe"],
    }
    loop = "take makeup kit | put makeup kit in bed"
    cards = [
        outcome("t1", 0.25),
        contrast("t1", games["t1"]),
        outcome("t3", 0.5),
        contrast("t3", games["t3"]),
    ]
    cards += [
        outcome("t2", 0.0),
        contrast("t2", games["t2"], best_success=False),
        failure("t2", {"loop": 3}, [{"mode": "loop", "rollout_id": "r1", "turn": 2, "excerpt": loop}]),
    ]
    edits = await RulesReviser(True, 2).revise(3, assess(E), cards, [])
    typed = [e.text for e in edits if e.scope == "type:twc"]
    assert [e.kind for e in edits if e.scope == "type:twc"] == ["skill", "mistake"]
    one_game = ["red shirt", "black pepper", "shelf", "long coat", "makeup kit", "bed"]
    for text in typed:
        assert not [w for w in one_game if w in text], text
    # Both wins share the pattern, and 'wardrobe', seen in two games, is the family's own word.
    assert typed[0].endswith("(the pattern of 2 of 2 games, from 2 won episodes; <object> and <place> stand "
                             "for this game's own): take <object> -> open wardrobe -> put <object> in wardrobe")  # fmt: skip
    assert "take <object> | put <object> in <place>" in typed[1]
    valid(edits, E, cards, [])


async def test_mistake_from_an_all_failed_group_with_repeated_actions(valid):
    edits = await RulesReviser(True, 2).revise(3, assess(E), REPEATS, [])
    assert edits == [
        AddEdit(
            kind="mistake", scope="type:twc", text=REPEAT_MISTAKE, cites=("c3-t2-failure", "c3-t2-outcome")
        )
    ]
    valid(edits, E, REPEATS, [])


async def test_guidance_for_a_failing_type_within_revise_budget(valid):
    cards = MIXED + REPEATS + [outcome("t3", 0.75), contrast("t3", ["open door", "go east"])]
    cards += [outcome("k1", 0.5, "coin"), contrast("k1", ["take coin"], task_type="coin")]  # another type
    edits = await RulesReviser(True, 2).revise(3, assess(R), cards, [])
    # One skill (the family pattern comes first: it reaches other games) and one mistake; nothing
    # for coin. EXPAND adds the plan of the rarer success (t1 at 0.5 before t3 at 0.75).
    assert [(e.kind, e.scope) for e in edits] == [("skill", "type:twc"), ("mistake", "type:twc")]
    valid(edits, R, cards, [])
    edits = await RulesReviser(True, 2).revise(3, assess(E), cards, [])
    assert [(e.kind, e.scope) for e in edits] == [
        ("skill", "type:twc"),
        ("plan", "task:t1"),
        ("mistake", "type:twc"),
    ]
    valid(edits, E, cards, [])


async def test_no_near_duplicates_and_no_second_plan():
    entries = [
        entry("m1", "type:twc", REPEAT_MISTAKE.replace("'look around'", "'look  around'"), "mistake"),
        entry("p1", "task:t1", "Steps that worked: open washer", "plan"),
    ]
    edits = await RulesReviser(True, 2).revise(3, assess(E), MIXED + REPEATS, entries)
    # The repeat lesson is there already, so the next failure mode (the loop) gives the mistake.
    assert [(e.kind, e.text) for e in edits] == [
        ("skill", FAMILY_T1),
        ("mistake", "Do not cycle through the same actions (go <direction> | go <direction>); from a state "
         "you have seen, try something new.")
    ]  # fmt: skip


async def test_expert_plan_when_nothing_succeeded(valid):
    """The whole expert plan, however early the policy left it (Stage 1's plans were cut three steps
    past the departure, in twc the first turn); the skill's label does not call a plan a win."""
    plan = [
        "look around",
        "go east",
        "open fridge",
        "take milk",
        "go west",
        "open fridge",
        "put milk in fridge",
    ]
    departure = {"rollout_id": "r1", "turn": 0, "expected": "look around", "taken": "inventory"}
    cards = [*REPEATS, card("t2", "expert", {"plan": plan, "first_departure": departure})]
    edits = await RulesReviser(True, 2).revise(3, assess(E), cards, [])
    assert (edits[0].kind, edits[0].scope) == ("skill", "type:twc")  # the expert plan, abstracted
    assert "milk" not in edits[0].text and "put <object> in <place>" in edits[0].text
    assert edits[0].text.startswith(
        "How to finish twc games (the pattern of 1 of 1 games, from 1 expert plan;"
    )
    assert "won" not in edits[0].text and "look around" not in edits[0].text
    assert edits[1] == AddEdit(
        kind="plan",
        scope="task:t2",
        text="Steps to try: go east -> open fridge -> take milk -> go west -> open fridge -> put milk in fridge",
        cites=("c3-t2-expert", "c3-t2-outcome"),
    )
    assert edits[2].kind == "mistake"
    valid(edits, E, cards, [])


async def test_plans_per_review_give_every_reviewed_task_its_plan(valid, count_tokens):
    """With the published budgets (plans count as skills) EXPAND writes the type's skill and one plan;
    with scaffold.plans_per_review the tasks' plans come beside them, one per task."""
    plans = {
        "t2": ["go east", "open fridge", "take milk", "go west", "put milk in fridge"],
        "t3": ["look around", "take red scarf", "open wardrobe", "put red scarf in wardrobe"],
        "t4": ["go north", "take dirty plate", "open dishwasher", "put dirty plate in dishwasher"],
    }
    tasks = tuple(plans)
    cards = [
        c
        for k in tasks
        for c in (outcome(k, 0.0), card(k, "expert", {"plan": plans[k], "first_departure": None}))
    ]

    def kinds(edits):
        return [(e.kind, e.scope) for e in edits]

    published = await RulesReviser(True, 2).revise(3, assess(E), cards, [])
    assert kinds(published) == [("skill", "type:twc"), ("plan", "task:t2")]
    edits = await RulesReviser(True, 2, plans_per_review=3).revise(3, assess(E), cards, [])
    assert kinds(edits) == [("skill", "type:twc")] + [("plan", f"task:{k}") for k in tasks]
    assert (
        validate_edits(
            edits,
            E,
            [],
            cards,
            count_tokens,
            removal=True,
            min_citations=2,
            task_type="twc",
            plans_per_review=3,
        )
        == []
    )
    # two free plans: the third counts as the mode's second skill; REVISE has no room left for it
    edits = await RulesReviser(True, 2, plans_per_review=2).revise(3, assess(E), cards, [])
    assert kinds(edits) == [("skill", "type:twc")] + [("plan", f"task:{k}") for k in tasks]
    edits = await RulesReviser(True, 2, plans_per_review=2).revise(3, assess(R), cards, [])
    assert kinds(edits) == [("skill", "type:twc"), ("plan", "task:t2"), ("plan", "task:t3")]


async def test_too_few_cards_to_cite_means_no_edit():
    assert await RulesReviser(True, 3).revise(3, assess(E), MIXED, []) == []
    assert len(await RulesReviser(True, 3).revise(3, assess(E), MIXED + [utility("t1", 0.5)], [])) == 2


SOLVED = [outcome("t1", 1.0), contrast("t1", WASHER), utility("t1", 0.25), outcome("t2", 1.0)]
BANK = [
    entry("g", "general", "Read the goal first.", step=0),
    entry("s_old", "type:twc", "Open containers to find items.", step=1),
    entry("plan1", "task:t1", PLAN_T1, "plan", step=2),
    entry("s_new", "type:twc", "Carry one item at a time.", step=2),
    entry("x", "task:t7", "Steps that worked: go west", "plan", step=0),  # not played this step
]


async def test_compress_removes_the_plan_of_an_all_passed_task(valid):
    edits = await RulesReviser(True, 2).revise(3, assess(C), SOLVED, BANK)
    assert edits == [
        DeleteEdit(
            entry_id="plan1",
            reason="its task's group all passed: the plan only removes variation",
            cites=("c3-t1-outcome", "c3-t1-utility"),
        )
    ]
    valid(edits, C, SOLVED, BANK)


async def test_compress_without_evidence_withdraws_the_oldest_non_general_entry(valid):
    cards = [outcome("t2", 0.75), outcome("t3", 1.0)]
    edits = await RulesReviser(True, 2).revise(3, assess(C), cards, BANK)
    assert [(e.op, e.entry_id, e.cites) for e in edits] == [
        ("DELETE", "s_old", ("c3-t2-outcome", "c3-t3-outcome"))
    ]
    valid(edits, C, cards, BANK)


async def test_harm_shown_by_probes_deletes_the_newest_entry(valid):
    """Probes without the scaffold won 3 of 4, scaffolded rollouts 1 of 12: the newest entry goes."""
    cards = [outcome("t1", 0.5), contrast("t1", ["open washer"])]
    cards += [utility(k, -0.6, with_=1 / 3 if k == "t1" else 0.0, without=1.0 if k != "t4" else 0.0)
              for k in ("t1", "t2", "t3", "t4")]  # fmt: skip
    entries = [e for e in BANK if e.id != "plan1"]
    edits = await RulesReviser(True, 2).revise(3, assess(R), cards, entries)
    targets = [(e.op, e.scope if isinstance(e, AddEdit) else e.entry_id) for e in edits]
    assert targets == [("ADD", "type:twc"), ("DELETE", "s_new")]
    valid(edits, R, cards, entries)


O1, C1 = "c3-t1-outcome", "c3-t1-contrast"


async def test_entries_the_llm_judge_grades_harmful_or_stale_are_withdrawn(valid):
    cards = [outcome("t1", 0.5), contrast("t1", ["open washer"]), outcome("t2", 0.0)]
    verdicts = (
        Verdict(
            entry_id="s_old", label="stale", reason="the policy opens containers unprompted", cites=(O1,)
        ),
        Verdict(entry_id="s_new", label="helpful", cites=(C1,)),
        Verdict(entry_id="plan1", label="harmful", reason="it names the wrong washer", cites=(C1, O1)),
        Verdict(entry_id="g", label="harmful", cites=(O1,)),  # general guidance is never the type's to drop
    )
    assessment = assess(R).model_copy(update={"verdicts": verdicts})
    edits = await RulesReviser(True, 2).revise(3, assessment, cards, BANK)
    deletes = {e.entry_id: e for e in edits if isinstance(e, DeleteEdit)}
    assert set(deletes) == {"s_old", "plan1"}
    assert deletes["s_old"].reason == "the judge graded it stale: the policy opens containers unprompted"
    assert set(deletes["plan1"].cites) >= {C1, O1}
    valid(edits, R, cards, BANK)
    assert not [
        e
        for e in await RulesReviser(False, 2).revise(3, assessment, cards, BANK)
        if isinstance(e, DeleteEdit)
    ]


@pytest.mark.parametrize(
    "utilities",
    [
        [utility(k, 0.0) for k in ("t1", "t2", "t3", "t4")],  # both sides failed: no evidence
        [utility("t1", -1.0, without=1.0)],  # one probe episode: too few to call it harm
        [
            utility(k, -0.08, with_=0.67, without=0.75, n_with=3, n_without=1)
            for k in ("t1", "t2", "t3", "t4")
        ],
    ],
)
async def test_no_utility_delete_without_evidence_of_harm(utilities):
    """The churn seen in the early run: utility <= 0 on all-failed groups deleted an entry every review."""
    cards = [outcome("t1", 0.0), contrast("t1", ["look around"], best_success=False), *utilities]
    entries = [e for e in BANK if e.id != "plan1"]
    edits = await RulesReviser(True, 2).revise(3, assess(R), cards, entries)
    assert not [e for e in edits if isinstance(e, DeleteEdit)]


async def test_prune_deletes_the_oldest_until_under_budget(valid):
    bank = [entry("g", "general", "Read the goal first.")]
    bank += [
        entry(f"s{i}", "type:twc", f"Skill number {i} is about {w}.", step=i) for i, w in enumerate("abcde")
    ]
    reviser = RulesReviser(True, 2, budget=ScaffoldBudget(max_entries=4, max_tokens=1000))
    cards = [outcome("t1", 0.5), outcome("t2", 0.0)]
    edits = await reviser.revise(3, assess(P), cards, bank)
    assert [e.entry_id for e in edits] == ["s0", "s1", "s2"]  # 6 entries -> 3, under 4
    valid(edits, P, cards, bank)
    reviser = RulesReviser(True, 2, budget=ScaffoldBudget(max_entries=100, max_tokens=45))
    assert [e.entry_id for e in await reviser.revise(3, assess(P), cards, bank)] == [
        "s0",
        "s1",
    ]  # 60 -> 40 tokens


def withdrawing(mode: ReviewMode, *scopes: str, open_: bool = True) -> Assessment:
    """The judge's assessment with `scopes` withdrawn (their average 0.3 at removal_threshold 0.25)."""
    withdrawn = tuple(ScopeSuccess(scope=s, success=0.3, withdraw=True) for s in scopes)
    return assess(mode).model_copy(update={"scopes": withdrawn, "removal_open": open_})


async def test_a_withdrawn_task_loses_its_plan_and_gets_no_new_one(valid):
    cards = [outcome("t1", 0.5), contrast("t1", WASHER), utility("t1", 0.0), outcome("t2", 0.25)]
    edits = await RulesReviser(True, 2).revise(3, withdrawing(R, "task:t1"), cards, BANK)
    assert [e for e in edits if isinstance(e, DeleteEdit)] == [
        DeleteEdit(
            entry_id="plan1",
            reason="task:t1 success average 0.30 reached the judge's removal threshold",
            cites=("c3-t1-outcome", "c3-t1-utility"),
        )
    ]
    valid(edits, R, cards, BANK)
    # EXPAND never deletes, but the withdrawn task gets no plan (the family skill still comes).
    edits = await RulesReviser(True, 2).revise(3, withdrawing(E, "task:t1"), MIXED, [])
    assert [(e.op, e.scope) for e in edits] == [("ADD", "type:twc")]
    # A withdrawn type: its type-scoped entries go (oldest first), nothing type-scoped is added.
    edits = await RulesReviser(True, 2).revise(3, withdrawing(R, "type:twc"), cards, BANK)
    assert [e.entry_id for e in edits if isinstance(e, DeleteEdit)] == ["s_old", "s_new"]
    assert not any(isinstance(e, AddEdit) and e.scope == "type:twc" for e in edits)
    valid(edits, R, cards, BANK)
    # removal off (the no_removal ablation): the judge's withdrawals change nothing.
    plain = await RulesReviser(False, 2).revise(3, assess(E), MIXED, [])
    assert await RulesReviser(False, 2).revise(3, withdrawing(E, "task:t1"), MIXED, []) == plain


async def test_the_warmup_holds_back_every_removal_but_prune(valid):
    closed = withdrawing(C, open_=False)
    assert (
        await RulesReviser(True, 2).revise(3, closed, SOLVED, BANK) == []
    )  # no all-passed plan, no COMPRESS
    opened = await RulesReviser(True, 2).revise(3, withdrawing(C), SOLVED, BANK)
    assert [e.entry_id for e in opened] == ["plan1"]
    harm = MIXED + REPEATS + [utility(k, -1.0, without=1.0) for k in ("t1", "t2", "t4", "t5")]
    deletes = [type(e) for e in await RulesReviser(True, 2).revise(3, withdrawing(R), harm, BANK)]
    assert DeleteEdit in deletes  # probes show harm: the newest entry goes once the warm-up is over
    deletes = [
        type(e) for e in await RulesReviser(True, 2).revise(3, withdrawing(R, open_=False), harm, BANK)
    ]
    assert DeleteEdit not in deletes
    reviser = RulesReviser(True, 2, budget=ScaffoldBudget(max_entries=3, max_tokens=1000))
    pruned = await reviser.revise(3, withdrawing(P, open_=False), SOLVED, BANK)
    assert [e.entry_id for e in pruned] == ["s_old", "plan1"]  # the budget is a limit, not evidence
    valid(pruned, P, SOLVED, BANK)


async def test_without_the_expert_card_no_plan_comes_from_expert_data():
    """What the rules reviser writes today with the expert card off (issue 23): task plans only from
    the policy's own wins ("Steps that worked"), never "Steps to try" (those need an expert card); with
    it, a task that nothing won gets the expert's prefix."""
    no_expert = [*MIXED, *REPEATS]
    plans = [e for e in await RulesReviser(True, 2).revise(3, assess(E), no_expert, []) if e.kind == "plan"]
    assert [(p.scope, p.text) for p in plans] == [("task:t1", PLAN_T1)]
    expert = card("t2", "expert", {"plan": ["go east", "take milk"], "first_departure": None})
    plans = [
        e
        for e in await RulesReviser(True, 2).revise(3, assess(E), [*no_expert, expert], [])
        if e.kind == "plan"
    ]
    assert [p.scope for p in plans] == ["task:t1"]  # EXPAND's 2 skills: the family card and t1's plan
    plans = [
        e
        for e in await RulesReviser(True, 2).revise(3, assess(E), [*REPEATS, expert], [])
        if e.kind == "plan"
    ]
    assert [p.text for p in plans] == ["Steps to try: go east -> take milk"]


async def test_task_plans_off_leaves_only_guidance_that_can_transfer(valid):
    expert = card("t2", "expert", {"plan": ["go east", "take milk"], "first_departure": None})
    cards = [*MIXED, *REPEATS, expert]
    edits = await RulesReviser(True, 2, task_plans=False).revise(3, assess(E), cards, [])
    assert [(e.kind, e.scope) for e in edits] == [("skill", "type:twc"), ("mistake", "type:twc")]
    valid(edits, E, cards, [])


SCENARIOS = {
    "mixed": (MIXED + REPEATS, []),
    "solved": (SOLVED, BANK),
    # Probes without the scaffold won 4 of 4, scaffolded rollouts 0 of 12: evidence of harm.
    "useless": (MIXED + REPEATS + [utility(k, -1.0, without=1.0) for k in ("t1", "t2", "t4", "t5")], BANK),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("mode", MODES)
async def test_removal_off_never_deletes(valid, scenario, mode):
    cards, entries = SCENARIOS[scenario]
    edits = await RulesReviser(False, 2, budget=ScaffoldBudget(max_entries=1)).revise(
        3, assess(mode), cards, entries
    )
    assert all(isinstance(e, AddEdit) for e in edits)
    valid(edits, mode, cards, entries, removal=False)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("mode", MODES)
async def test_grow_only_adds(valid, scenario, mode):
    cards, entries = SCENARIOS[scenario]
    grow = RulesReviser(True, 2, mode_of_scaffold="grow", budget=ScaffoldBudget(max_entries=1))
    edits = await grow.revise(3, assess(mode), cards, entries)
    assert all(isinstance(e, AddEdit) for e in edits)
    valid(edits, mode, cards, entries)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("min_citations", [0, 2, 3])
async def test_pats_edit_sets_always_validate(valid, scenario, mode, min_citations):
    cards, entries = SCENARIOS[scenario]
    reviser = RulesReviser(True, min_citations, budget=ScaffoldBudget(max_entries=2, max_tokens=30))
    edits = await reviser.revise(3, assess(mode), cards, entries)
    valid(edits, mode, cards, entries, min_citations=min_citations)
    if mode is not E and scenario != "mixed":
        assert any(isinstance(e, DeleteEdit) for e in edits)  # the evidence asks for removal


def test_the_spec_reaches_the_rules_reviser_and_the_judge():
    from pathlib import Path

    from pats.build import build_judge, build_revisers
    from pats.spec import load_spec

    spec = load_spec(
        Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml",
        [
            "scaffold.task_plans=false",
            "scaffold.plans_per_review=0",
            "judge.removal_warmup=4",
            "judge.removal_threshold=0.25",
            "judge.ema_start=0",
        ],
    )
    _, rules = build_revisers(spec)
    assert rules.task_plans is False
    judge = build_judge(spec)
    assert (judge.spec.removal_warmup, judge.spec.removal_threshold, judge.spec.ema_start) == (4, 0.25, 0.0)


def test_plans_per_review_reaches_the_rules_reviser_and_is_refused_where_it_cannot_apply():
    from pathlib import Path

    from pats.build import build_revisers
    from pats.errors import SpecError
    from pats.spec import load_spec

    experiments = Path(__file__).resolve().parents[1] / "experiments"
    _, rules = build_revisers(load_spec(experiments / "quickstart.yaml", ["scaffold.plans_per_review=4"]))
    assert rules.plans_per_review == 4
    with pytest.raises(SpecError) as err:
        load_spec(
            experiments / "quickstart.yaml", ["scaffold.plans_per_review=4", "scaffold.task_plans=false"]
        )
    assert "scaffold.task_plans is false, so reviews add no task plans; set plans_per_review: 0" in str(
        err.value
    )
    with pytest.raises(SpecError) as err:
        load_spec(experiments / "ablations" / "llm_reviser_openai.yaml", ["scaffold.plans_per_review=4"])
    assert "reviser.kind llm answers in the published mode budgets" in str(err.value)
