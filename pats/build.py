"""Build the scaffold policy from a spec, once: the mode picks its parts, the kinds pick judge and reviser.

This is the one place that reads `scaffold.mode`, `judge.kind` and `reviser.kind`; the engine loop
only calls the objects built here. Judge and reviser kinds are the spec's closed unions, so their
builders are plain dicts keyed by those kinds (JUDGE_BUILDERS, REVISER_BUILDERS; a test checks that the
keys are the spec's kinds); only environments come from other packages (pats.registry).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pats.protocols import TokenCounter
from pats.review import Reviewer, ScaffoldPolicy, check_edits
from pats.scaffold import ScaffoldStore, load_bank
from pats.spec.models import ExperimentSpec
from pats.types import Task


def _stats_judge(spec: ExperimentSpec):
    from pats.judges import StatsJudge

    return StatsJudge(spec.judge, spec.scaffold.budget)


def _llm_judge(spec: ExperimentSpec):
    from pats.judges import LLMJudge

    assert spec.judge.kind == "llm", "JUDGE_BUILDERS picks this builder by judge.kind"
    return LLMJudge(
        spec.judge, spec.scaffold.budget, spec.environment.kind, budget_s=spec.scaffold.review_budget_s
    )


def _rules_reviser(spec: ExperimentSpec, rules, check):
    return rules, rules


def _llm_reviser(spec: ExperimentSpec, rules, check):
    from pats.reviser import LLMReviser
    from pats.reviser.prompt import ReviserSettings

    assert spec.reviser.kind == "llm", "REVISER_BUILDERS picks this builder by reviser.kind"
    llm = LLMReviser(spec.reviser, ReviserSettings.of(spec.scaffold), check=check)
    return llm, rules


JUDGE_BUILDERS = {"stats": _stats_judge, "llm": _llm_judge}  # judge.kind -> builder(spec) -> Judge
# reviser.kind -> builder(spec, rules) -> (reviser, fallback)
REVISER_BUILDERS = {"rules": _rules_reviser, "llm": _llm_reviser}


def build_judge(spec: ExperimentSpec):
    return JUDGE_BUILDERS[spec.judge.kind](spec)


def build_revisers(spec: ExperimentSpec, count_tokens: TokenCounter | None = None):
    """(reviser, fallback): the fallback is always the offline rules reviser. `count_tokens` (the
    policy's tokenizer) gives an LLM reviser the review's own check, which its program asks again with."""
    sc = spec.scaffold
    from pats.reviser import RulesReviser

    rules = RulesReviser.for_scaffold(sc)
    check = None
    if count_tokens is not None:
        counter = count_tokens

        def check(edits, assessment, entries, cards):
            return check_edits(sc, edits, assessment, entries, cards, counter)

    return REVISER_BUILDERS[spec.reviser.kind](spec, rules, check)


def build_scaffold_policy(
    spec: ExperimentSpec,
    directory: Path | None,
    count_tokens: TokenCounter,
    expert_plan: Callable[[Task], Sequence[str] | None] | None = None,
    task_types: Sequence[str] | None = None,
    upto_version: int | None = None,
) -> ScaffoldPolicy:
    """`task_types`: the environment's type names, so a bank's type-scoped skills land on them."""
    sc = spec.scaffold
    if sc.mode == "none":
        return ScaffoldPolicy("none")
    store = (
        ScaffoldStore.open(directory, count_tokens, sc.budget.view_tokens, upto=upto_version)
        if directory
        else ScaffoldStore(count_tokens, sc.budget.view_tokens)
    )
    if store.current.number == 0 and sc.initial_bank:  # a fresh run (a resumed one has versions)
        store.seed(load_bank(sc.initial_bank, task_types=task_types), step=0)
    if not sc.reviews:  # static: the bank, never edited
        return ScaffoldPolicy(sc.mode, store)
    reviser, fallback = build_revisers(spec, count_tokens)
    reviewer = Reviewer(
        store,
        sc,
        build_judge(spec),
        reviser,
        fallback,
        count_tokens,
        expert_plan=expert_plan if sc.privileged else None,
    )
    return ScaffoldPolicy(sc.mode, store, reviewer)
