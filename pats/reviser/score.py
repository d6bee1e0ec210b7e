"""Scoring a reviser's answer on a recorded bundle: what the review would make of it, counted.

One definition, used by the benchmark (`pats reviser bench`, pats.reviser.bench) and the compiler
(`pats compile-reviser`, pats.reviser.compile):
- an edit set is checked with the review's own check (`problems`: `pats.review.check_edits`, the
  validator with a run's min_citations, removal, task plans and grow mode), under the bundle's run
  settings or, when compiling, the spec's;
- the reference its kinds of edit are measured against is the offline rules reviser's answer on the
  same bundle (`rules_answer`), and the agreement is `pats.reviser.program.kinds_as_reference`, which
  the compile metric scores too (agreement with the reference, not sense).

`score(bundle, reviser, count_tokens)` asks the reviser as the review does: an LLM reviser built with
the bundle's check (`bundle_check`) runs its program's `refine` (its first answer, then, if refused, one
more with the problems; the rules fallback is left out); the rules reviser answers once. The first
answer is scored in full (`BundleScore`), and whether the set after the retry was accepted is counted
beside it: whether an edit list came back (`parsed`; when no answer could be used, the caller's
JudgeError whole in `error` and the kind of its last fault in `fault`: a timeout, an HTTP error, a
malformed answer), the edits proposed, the edits no validator problem names (`valid_edits`), whether the set
as a whole is accepted (`set_valid`: what the review applies), the refusing rules by name, whether the
citations keep the citation rules, how far an accepted set's kinds of edit are the rules reviser's
(`kinds_as_rules`), and the type's scaffold tokens before and after the valid edits (counted with the
run's policy tokenizer). Calls, tokens (prompt and completion apart) and seconds are the reviser's own
`usage()` over the call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from pydantic import SerializerFunctionWrapHandler, model_serializer

from pats.errors import JudgeError
from pats.lm.faults import fault_kind
from pats.protocols import TokenCounter
from pats.review import check_edits
from pats.reviser.bundles import ReviserBundle
from pats.reviser.llm import Check, LLMReviser
from pats.reviser.program import kinds_as_reference
from pats.reviser.rules import RulesReviser
from pats.scaffold.problems import CITATION_RULES, rule_of, valid_indices
from pats.scaffold.validate import texts_after
from pats.spec.models import ScaffoldSpec
from pats.types import Edit, Record


class BundleScore(Record):
    """One reviser's first answer on one bundle, as the review's check sees it (a row of the benchmark)."""

    bundle: str
    environment: str
    task_type: str
    mode: str
    split: str = "heldout"
    parsed: bool
    answers: int = 0  # answers the program gave (the first, and one more if the first was refused)
    valid_after_retry: bool = False  # the last answer's set was accepted (the review would apply it)
    error: str = (
        ""  # why not parsed: the caller's JudgeError, whole (its first 400 characters before 2026-12-06)
    )
    fault: str = ""  # why not parsed: the last fault's kind (pats.lm.faults.FAULT_KINDS); written when set
    proposed: int = 0
    valid_edits: int = 0  # edits no validator problem names
    set_valid: bool = False  # the set is accepted as a whole (the review applies it)
    rules: tuple[str, ...] = ()  # the rules that refused it, one per problem
    problems: tuple[str, ...] = ()
    citations_valid: bool | None = None  # no unknown card, enough distinct cards per edit; None: not parsed
    ops: tuple[str, ...] = ()  # ADD/UPDATE/DELETE of each proposed edit
    edits: tuple[Edit, ...] = ()  # the proposed edits, to read what the reviser wrote
    rules_ops: tuple[str, ...] = ()  # the kinds of edit the rules reviser writes on this bundle
    kinds_as_rules: float | None = None  # accepted sets: kinds_as_reference against rules_ops; None else
    tokens_before: int = 0  # the type's scaffold entries
    tokens_after: int = 0  # ... after applying the valid edits
    calls: int = 0
    llm_tokens: int = 0  # prompt + completion, as the server reported them
    prompt_tokens: int = 0  # of llm_tokens, the prompts' (0 in results written before they were split)
    completion_tokens: int = 0  # ... and the answers'
    seconds: float = 0.0

    @model_serializer(mode="wrap")
    def _without_empty_fault(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Rows written before `fault` existed read back and are written again as they were.
        out = handler(self)
        if not self.fault:
            out.pop("fault", None)
        return out


def rules_answer(bundle: ReviserBundle, scaffold: ScaffoldSpec | None = None) -> list[Edit]:
    """The rules reviser's answer on the bundle under `scaffold`'s settings (default: the bundle's
    run): the reference of the kinds of edit, and the labeled demos' answers."""
    b = bundle
    rules = RulesReviser.for_scaffold(scaffold if scaffold is not None else b.scaffold)
    return asyncio.run(rules.revise(b.step, b.assessment, b.cards, b.entries))


def problems(
    bundle: ReviserBundle, edits: Sequence[Edit], count: TokenCounter, scaffold: ScaffoldSpec | None = None
) -> list[str]:
    """The review's check of an edit set on the bundle under `scaffold`'s settings (default: the
    bundle's run); empty when the review would apply it."""
    b = bundle
    sc = scaffold if scaffold is not None else b.scaffold
    return check_edits(sc, edits, b.assessment, b.entries, b.cards, count)


def bundle_check(bundle: ReviserBundle, count: TokenCounter) -> Check:
    """The review's check under the bundle's run settings, in the form an LLMReviser's `check` takes."""

    def check(edits, assessment, entries, cards) -> list[str]:
        return check_edits(bundle.scaffold, edits, assessment, entries, cards, count)

    return check


def edit_set_fields(bundle: ReviserBundle, edits: Sequence[Edit], count: TokenCounter) -> dict[str, Any]:
    """The validator's view of an edit set on the bundle: the BundleScore fields it sets."""
    found = problems(bundle, edits, count)
    rules = tuple(rule_of(p) for p in found)
    valid = [edits[i] for i in valid_indices(edits, found)]
    return {
        "proposed": len(edits),
        "valid_edits": len(valid),
        "set_valid": not found,
        "rules": rules,
        "problems": tuple(found),
        "citations_valid": not CITATION_RULES & set(rules),
        "ops": tuple(e.op for e in edits),
        "edits": tuple(edits),
        "tokens_before": sum(count(e.text) for e in bundle.entries),
        "tokens_after": sum(count(t) for t in texts_after(bundle.entries, valid)),
    }


def kinds_fields(bundle: ReviserBundle, edits: Sequence[Edit], set_valid: bool) -> dict[str, Any]:
    """The rules reviser's kinds of edit on the bundle and, for an accepted set, how far its kinds are
    those (the BundleScore fields `rules_ops` and `kinds_as_rules`)."""
    reference = rules_answer(bundle)
    return {
        "rules_ops": tuple(e.op for e in reference),
        "kinds_as_rules": kinds_as_reference(edits, reference) if set_valid else None,
    }


def score(bundle: ReviserBundle, reviser: RulesReviser | LLMReviser, count: TokenCounter) -> BundleScore:
    """The reviser on the bundle, as the review asks it, checked and counted: the first answer in full,
    the last one's acceptance beside it. An LLM reviser without a check answers once."""
    before, started = reviser.usage(), time.perf_counter()
    head = {
        "bundle": bundle.name,
        "environment": bundle.environment,
        "task_type": bundle.task_type,
        "mode": bundle.assessment.mode.value,
        "split": bundle.split,
    }
    args = (bundle.step, bundle.assessment, bundle.cards, bundle.entries)
    fields: dict[str, Any]
    try:
        last_ok: bool | None = None
        if isinstance(reviser, LLMReviser) and reviser.check is not None:
            refinement = asyncio.run(reviser.refine(*args))
            first, answers, last_ok = (
                list(refinement.attempts[0].edits),
                len(refinement.attempts),
                refinement.accepted,
            )
        else:
            first, answers = asyncio.run(reviser.revise(*args)), 1
        fields = {"parsed": True, **edit_set_fields(bundle, first, count), "answers": answers}
        fields["valid_after_retry"] = fields["set_valid"] if last_ok is None else last_ok
        fields.update(kinds_fields(bundle, first, fields["set_valid"]))
    except JudgeError as err:
        tokens = sum(count(e.text) for e in bundle.entries)
        last = reviser.caller.last_error if isinstance(reviser, LLMReviser) else None
        fields = {
            "parsed": False,
            "error": str(err),
            "fault": (fault_kind(last) if last is not None else None) or "other",
            "tokens_before": tokens,
            "tokens_after": tokens,
        }
    seconds = time.perf_counter() - started
    used = reviser.usage() - before
    return BundleScore(
        **head,
        **fields,
        calls=used.calls,
        llm_tokens=used.tokens,
        prompt_tokens=used.prompt_tokens,
        completion_tokens=used.completion_tokens,
        seconds=used.seconds if used.calls else seconds,
    )
