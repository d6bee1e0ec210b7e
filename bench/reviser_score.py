"""Scoring one reviser answer on one bundle: what the review would make of it, counted.

`score(bundle, reviser, count_tokens)` calls `reviser.revise` once with the bundle's input (the first
attempt of a review: no feedback, no retry with the errors, no rules fallback) and checks the answer
with the review's own check (`pats.review.check_edits`: the validator with the run's min_citations,
removal, task plans and grow mode). It counts: whether an edit list came back (`parsed`; an answer the
reviser could not read raises JudgeError and is not parsed), the edits proposed, the edits no validator
problem names (`valid_edits`) and whether the set as a whole is accepted (`set_valid`: what the review
applies), the refusing rules by name, whether the citations keep the citation rules, and the type's
scaffold tokens before and after applying the valid edits (counted with the run's policy tokenizer).
Calls, tokens and seconds are the reviser's own `usage()` over the call.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence

from reviser_bundles import ReviserBundle

from pats.errors import JudgeError
from pats.protocols import TokenCounter
from pats.review import check_edits
from pats.scaffold.validate import texts_after
from pats.types import Edit, LLMUsage, Record

# The validator's messages, by the rule that wrote them (pats/scaffold/validate.py): the first pattern
# a problem matches names it.
RULES: tuple[tuple[str, str], ...] = (
    ("unknown_card", "cites unknown card"),
    ("too_few_citations", r"distinct card\(s\); cite at least"),
    ("prune_only_deletes", "PRUNE only deletes"),
    ("compress_add_alone", "COMPRESS adds only beside"),
    ("compress_not_smaller", "COMPRESS must lower the total"),
    ("compress_removal_off", r"edit set \(COMPRESS\): removal is off"),
    ("mode_add_budget", r"ADDs; \w+ accepts at most"),
    ("removal_off", "removal is off"),
    ("mode_no_delete", "does not delete"),
    ("scope_outside_type", "is not one of this type's"),
    ("bad_scope", "is not 'general', 'type:"),
    ("plan_not_task_scoped", "a plan belongs to one task"),
    ("unknown_entry", "no entry '"),
    ("entry_outside_type", "not this type's; edit only entries"),
    ("entry_edited_twice", "is already edited by edit"),
    ("empty_text", "text is empty"),
    ("near_duplicate", "near-duplicate"),
    ("task_plans_off", "task_plans is false"),
    ("grow_add_only", "mode grow only adds"),
    ("not_an_edit", "is not an ADD, UPDATE or DELETE"),
)
CITATION_RULES = frozenset({"unknown_card", "too_few_citations"})
EDIT_INDEX = re.compile(r"^edits? ([\d, ]+)")


class BundleScore(Record):
    bundle: str
    environment: str
    task_type: str
    mode: str
    parsed: bool
    error: str = ""  # why not parsed: the reviser's JudgeError, first line
    proposed: int = 0
    valid_edits: int = 0  # edits no validator problem names
    set_valid: bool = False  # the set is accepted as a whole (the review applies it)
    rules: tuple[str, ...] = ()  # the rules that refused it, one per problem
    problems: tuple[str, ...] = ()
    citations_valid: bool | None = None  # no unknown card, enough distinct cards per edit; None: not parsed
    ops: tuple[str, ...] = ()  # ADD/UPDATE/DELETE of each proposed edit
    edits: tuple[Edit, ...] = ()  # the proposed edits, to read what the reviser wrote
    tokens_before: int = 0  # the type's scaffold entries
    tokens_after: int = 0  # ... after applying the valid edits
    calls: int = 0
    llm_tokens: int = 0  # prompt + completion, as the server reported them
    seconds: float = 0.0


def rule_of(problem: str) -> str:
    return next((name for name, pattern in RULES if re.search(pattern, problem)), "other")


def named_edits(problem: str) -> set[int]:
    """The indices of the edits a problem names ('edit 2 (...)', 'edits 0, 1: ...'); none for a set's."""
    m = EDIT_INDEX.match(problem)
    return {int(i) for i in m.group(1).replace(",", " ").split()} if m else set()


def check(bundle: ReviserBundle, edits: Sequence[Edit], count: TokenCounter) -> dict:
    """The validator's view of an edit set for this bundle (the fields of BundleScore it sets)."""
    problems = check_edits(bundle.scaffold, edits, bundle.assessment, bundle.entries, bundle.cards, count)
    rules = tuple(rule_of(p) for p in problems)
    set_wide = any(not named_edits(p) for p in problems)
    named = set().union(*(named_edits(p) for p in problems)) if problems else set()
    valid = [] if set_wide else [e for i, e in enumerate(edits) if i not in named]
    return {
        "proposed": len(edits),
        "valid_edits": len(valid),
        "set_valid": not problems,
        "rules": rules,
        "problems": tuple(problems),
        "citations_valid": not CITATION_RULES & set(rules),
        "ops": tuple(e.op for e in edits),
        "edits": tuple(edits),
        "tokens_before": sum(count(e.text) for e in bundle.entries),
        "tokens_after": sum(count(t) for t in texts_after(bundle.entries, valid)),
    }


def score(bundle: ReviserBundle, reviser, count: TokenCounter) -> BundleScore:
    """One call of `reviser` (LLMReviser or RulesReviser) on the bundle, checked and counted."""
    usage = getattr(reviser, "usage", lambda: LLMUsage())
    before, started = usage(), time.perf_counter()
    head = {
        "bundle": bundle.name,
        "environment": bundle.environment,
        "task_type": bundle.task_type,
        "mode": bundle.assessment.mode.value,
    }
    try:
        edits = asyncio.run(reviser.revise(bundle.step, bundle.assessment, bundle.cards, bundle.entries))
        fields = {"parsed": True, **check(bundle, edits, count)}
    except JudgeError as err:
        tokens = sum(count(e.text) for e in bundle.entries)
        fields = {
            "parsed": False,
            "error": str(err).splitlines()[0][:400],
            "tokens_before": tokens,
            "tokens_after": tokens,
        }
    seconds = time.perf_counter() - started
    used = usage() - before
    return BundleScore(
        **head,
        **fields,
        calls=used.calls,
        llm_tokens=used.tokens,
        seconds=used.seconds if used.calls else seconds,
    )
