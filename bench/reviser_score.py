"""Scoring one reviser answer on one bundle: what the review would make of it, counted.

`score(bundle, reviser, count_tokens)` asks the reviser as the review does: an LLM reviser built with
the bundle's check (`bundle_check`) runs its program's `refine` (its first answer, then, if refused, one
more with the problems; the rules fallback is left out); any other reviser answers once. The first
answer is scored in full, and whether the set after the retry was accepted is counted beside it. The
first answer is checked with the review's own check (`pats.review.check_edits`: the validator with the run's min_citations,
removal, task plans and grow mode). It counts: whether an edit list came back (`parsed`; an answer the
reviser could not read raises JudgeError and is not parsed), the edits proposed, the edits no validator
problem names (`valid_edits`) and whether the set as a whole is accepted (`set_valid`: what the review
applies), how far an accepted set's kinds of edit are the rules reviser's on the same bundle
(`kinds_as_rules`, the compile metric's `kinds_as_reference`: agreement with the reference, not
sense), the refusing rules by name, whether the citations keep the citation rules, and the type's
scaffold tokens before and after applying the valid edits (counted with the run's policy tokenizer).
Calls, tokens (prompt and completion apart, and their sum) and seconds are the reviser's own `usage()`
over the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from reviser_bundles import ReviserBundle

from pats.errors import JudgeError
from pats.protocols import TokenCounter
from pats.review import check_edits
from pats.reviser.program import kinds_as_reference
from pats.reviser.rules import RulesReviser
from pats.scaffold.problems import CITATION_RULES, rule_of, valid_indices
from pats.scaffold.validate import texts_after
from pats.types import Edit, LLMUsage, Record


class BundleScore(Record):
    bundle: str
    environment: str
    task_type: str
    mode: str
    split: str = "heldout"
    parsed: bool
    answers: int = 0  # answers the program gave (the first, and one more if the first was refused)
    valid_after_retry: bool = False  # the last answer's set was accepted (the review would apply it)
    error: str = ""  # why not parsed: the reviser's JudgeError, first line
    proposed: int = 0
    valid_edits: int = 0  # edits no validator problem names
    set_valid: bool = False  # the set is accepted as a whole (the review applies it)
    rules: tuple[str, ...] = ()  # the rules that refused it, one per problem
    problems: tuple[str, ...] = ()
    citations_valid: bool | None = None  # no unknown card, enough distinct cards per edit; None: not parsed
    ops: tuple[str, ...] = ()  # ADD/UPDATE/DELETE of each proposed edit
    edits: tuple[Edit, ...] = ()  # the proposed edits, to read what the reviser wrote
    rules_ops: tuple[str, ...] = ()  # the kinds of edit the rules reviser writes on this bundle
    kinds_as_rules: float | None = None  # accepted sets: pats.reviser.program.kinds_as_reference; None else
    tokens_before: int = 0  # the type's scaffold entries
    tokens_after: int = 0  # ... after applying the valid edits
    calls: int = 0
    llm_tokens: int = 0  # prompt + completion, as the server reported them
    prompt_tokens: int = 0  # of llm_tokens, the prompts' (0 in results written before they were split)
    completion_tokens: int = 0  # ... and the answers'
    seconds: float = 0.0


def check(bundle: ReviserBundle, edits: Sequence[Edit], count: TokenCounter) -> dict:
    """The validator's view of an edit set for this bundle (the fields of BundleScore it sets)."""
    problems = check_edits(bundle.scaffold, edits, bundle.assessment, bundle.entries, bundle.cards, count)
    rules = tuple(rule_of(p) for p in problems)
    valid = [edits[i] for i in valid_indices(edits, problems)]
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


def kinds_fields(bundle: ReviserBundle, edits: Sequence[Edit], set_valid: bool) -> dict:
    """The rules reviser's kinds of edit on the bundle (under its run settings) and, for an accepted
    set, how far its kinds are those (the BundleScore fields `rules_ops` and `kinds_as_rules`)."""
    b = bundle
    reference = asyncio.run(
        RulesReviser.for_scaffold(b.scaffold).revise(b.step, b.assessment, b.cards, b.entries)
    )
    return {
        "rules_ops": tuple(e.op for e in reference),
        "kinds_as_rules": kinds_as_reference(edits, reference) if set_valid else None,
    }


def bundle_check(bundle: ReviserBundle, count: TokenCounter):
    """The review's check of an edit set under the bundle's run settings, as a reviser's `check`."""

    def check(edits, assessment, entries, cards) -> list[str]:
        return check_edits(bundle.scaffold, edits, assessment, entries, cards, count)

    return check


def score(bundle: ReviserBundle, reviser, count: TokenCounter) -> BundleScore:
    """The reviser (LLMReviser or RulesReviser) on the bundle, as the review asks it, checked and
    counted: the first answer in full, the last one's acceptance beside it."""
    usage = getattr(reviser, "usage", lambda: LLMUsage())
    before, started = usage(), time.perf_counter()
    head = {
        "bundle": bundle.name,
        "environment": bundle.environment,
        "task_type": bundle.task_type,
        "mode": bundle.assessment.mode.value,
        "split": bundle.split,
    }
    args = (bundle.step, bundle.assessment, bundle.cards, bundle.entries)
    try:
        if getattr(reviser, "check", None) is not None:
            refinement = asyncio.run(reviser.refine(*args))
            first, answers, last_ok = (
                list(refinement.attempts[0].edits),
                len(refinement.attempts),
                refinement.accepted,
            )
        else:
            first = asyncio.run(reviser.revise(*args))
            answers, last_ok = 1, None
        fields = {"parsed": True, **check(bundle, first, count), "answers": answers}
        fields["valid_after_retry"] = fields["set_valid"] if last_ok is None else last_ok
        fields.update(kinds_fields(bundle, first, fields["set_valid"]))
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
        prompt_tokens=used.prompt_tokens,
        completion_tokens=used.completion_tokens,
        seconds=used.seconds if used.calls else seconds,
    )
