"""The reviser benchmark's own checks: an oracle row and a perturbation table.

- Oracle (`oracle_row`): a known-good answer for a bundle, the rules reviser's accepted edits
  (`pats.reviser.score.rules_answer`) written in card names (citations in the cards' order, as the
  schema asks, at most its CITES_MAX), served by the scripted OpenAI server through the LLM reviser's
  whole path as `pats reviser bench` builds it (schema sent as response_format, JSON adapter, card names
  mapped back, the review's check). It passes when the answer keeps to the schema the reviser sent, is
  parsed, and the check accepts it: so schema, adapter, parser and validator are shown to let a good
  answer through.
- Perturbations (`perturbation_rows`): for each rule of the validator (pats.scaffold.problems.RULES),
  an answer that breaks exactly that rule, on a bundle (or a copy of one with the mode or settings the
  rule needs), checked with the review's check: it must be refused, and by that rule. Beside it,
  whether the schema the reviser would send already refuses that answer. Two rules guard the store
  only (a scope of no known form, an object that is not an edit): they are checked with the store's
  `edit_problems`, since no typed edit a review handles can reach them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pats.lm.schema import CITES_MAX
from pats.protocols import TokenCounter
from pats.review import check_edits
from pats.reviser.bench import Contender, reviser_for
from pats.reviser.bundles import ReviserBundle
from pats.reviser.llm import LLMReviser, revise_call
from pats.reviser.score import rules_answer
from pats.scaffold.problems import rule_of
from pats.scaffold.validate import edit_problems
from pats.types import AddEdit, DeleteEdit, Edit, ReviewMode, ScaffoldEntry, UpdateEdit


def schema_accepts(schema: dict, answer: dict) -> bool:
    import jsonschema

    return jsonschema.Draft202012Validator(schema).is_valid(answer)


def in_card_order(bundle: ReviserBundle, edits: list[Edit]) -> list[Edit]:
    """The edits with their citations in the order the cards are shown (the schema's distinct form)."""
    order = {c.id: i for i, c in enumerate(c for c in bundle.cards if c.task_type == bundle.task_type)}
    return [
        e.model_copy(update={"cites": tuple(sorted(e.cites, key=lambda c: order.get(c, 1 << 30)))})
        for e in edits
    ]


def oracle_row(bundle: ReviserBundle, count: TokenCounter) -> dict:
    """The rules reviser's answer served through the LLM reviser's path: schema, parse, check."""
    from pats.spec.models import LLMSpec
    from pats.testing import ScriptedOpenAIServer

    call = revise_call(_prompt(), bundle.assessment, bundle.cards, bundle.entries, _settings(bundle))
    # At most CITES_MAX citations an edit, the schema's cap (the rules reviser withdraws an entry citing
    # every card the judge's grade cited: 6 in an LLM-judge bundle); its first ones in the cards' order.
    good = [
        e.model_copy(update={"cites": e.cites[:CITES_MAX]})
        for e in call.aliases.in_order(rules_answer(bundle), bundle.entries)
    ]
    answer = {"edits": [e.model_dump(mode="json") for e in call.aliases.to_names(good)]}
    with ScriptedOpenAIServer([json.dumps(answer)], structured=True) as server:
        llm = LLMSpec(model="hosted_vllm/oracle", api_base=server.base_url, api_key_env=None, timeout_s=30.0,
                      max_retries=0, structured="on")  # fmt: skip
        reviser = reviser_for(Contender(label="oracle", llm=llm), bundle, count)
        assert isinstance(reviser, LLMReviser)
        try:
            refinement = _run(reviser.refine(bundle.step, bundle.assessment, bundle.cards, bundle.entries))
        finally:
            reviser.caller.close()
        sent = server.requests[0]["response_format"]["json_schema"]["schema"]
    first = refinement.attempts[0]
    return {
        "bundle": bundle.name,
        "mode": bundle.assessment.mode.value,
        "edits": len(good),
        "schema_accepts": schema_accepts(sent, answer),
        "parsed": True,
        "accepted": not first.problems,
        "problems": list(first.problems),
        "same_edits": list(first.edits) == good,
        "passes": schema_accepts(sent, answer) and not first.problems and list(first.edits) == good,
    }


def _run(coro):
    import asyncio

    return asyncio.run(coro)


def _prompt():
    from pats.reviser.llm import load_reviser_prompt

    return load_reviser_prompt()


def _settings(bundle: ReviserBundle):
    from pats.reviser.llm import ReviserSettings

    return ReviserSettings.of(bundle.scaffold)


# -- perturbations ----------------------------------------------------------------------------------------

Breaker = Callable[[ReviserBundle], tuple[ReviserBundle, list[Edit]]]


def _mode(bundle: ReviserBundle, review: ReviewMode, **scaffold) -> ReviserBundle:
    """A copy of the bundle reviewed in mode `review`, with `scaffold` settings changed."""
    assessment = bundle.assessment.model_copy(update={"mode": review})
    return bundle.model_copy(
        update={"assessment": assessment, "scaffold": bundle.scaffold.model_copy(update=scaffold)}
    )


def _cards(bundle: ReviserBundle, n: int = 2) -> tuple[str, ...]:
    return tuple(c.id for c in bundle.cards if c.task_type == bundle.task_type)[:n]


def _add(bundle: ReviserBundle, text: str = "Open each container before taking from it.", **kw) -> AddEdit:
    fields = {
        "kind": "skill",
        "scope": f"type:{bundle.task_type}",
        "text": text,
        "cites": _cards(bundle),
        **kw,
    }
    return AddEdit(**fields)


def _entry(bundle: ReviserBundle) -> ScaffoldEntry:
    return bundle.entries[0]


def _with_entry(bundle: ReviserBundle, scope: str, text: str = "Look before you take.") -> ReviserBundle:
    extra = ScaffoldEntry(
        id="px1", kind="skill", scope=scope, text=text, tokens=4, created_step=0, updated_step=0
    )
    return bundle.model_copy(update={"entries": (*bundle.entries, extra)})


PERTURBATIONS: dict[str, Breaker] = {
    "unknown_card": lambda b: (b, [_add(b, cites=(_cards(b)[0], "c99-no-such-card"))]),
    "too_few_citations": lambda b: (b, [_add(b, cites=_cards(b, 1))]),
    "prune_only_deletes": lambda b: (_mode(b, ReviewMode.PRUNE), [_add(b)]),
    "compress_add_alone": lambda b: (_mode(b, ReviewMode.COMPRESS), [_add(b)]),
    "compress_not_smaller": lambda b: (
        _mode(b, ReviewMode.COMPRESS),
        [UpdateEdit(entry_id=_entry(b).id, text=_entry(b).text + " Then check it twice.", cites=_cards(b))],
    ),
    "compress_removal_off": lambda b: (
        _mode(b, ReviewMode.COMPRESS, removal=False),
        [UpdateEdit(entry_id=_entry(b).id, text="Shorter.", cites=_cards(b))],
    ),
    "mode_add_budget": lambda b: (
        _mode(b, ReviewMode.EXPAND),
        [
            _add(b, text=t)
            for t in ("Take the item first.", "Go to where it belongs next.", "Put it down last of all.")
        ],
    ),
    "removal_off": lambda b: (
        _mode(b, ReviewMode.REVISE, removal=False),
        [DeleteEdit(entry_id=_entry(b).id, reason="stale", cites=_cards(b))],
    ),
    "mode_no_delete": lambda b: (
        _mode(b, ReviewMode.EXPAND),
        [DeleteEdit(entry_id=_entry(b).id, reason="stale", cites=_cards(b))],
    ),
    "scope_outside_type": lambda b: (b, [_add(b, scope="type:some_other_type")]),
    "plan_not_task_scoped": lambda b: (b, [_add(b, kind="plan")]),
    "unknown_entry": lambda b: (b, [UpdateEdit(entry_id="no-such-entry", text="x y z", cites=_cards(b))]),
    "entry_outside_type": lambda b: (
        _with_entry(b, "type:some_other_type"),
        [UpdateEdit(entry_id="px1", text="Look inside first.", cites=_cards(b))],
    ),
    "entry_edited_twice": lambda b: (
        b,
        [
            UpdateEdit(entry_id=_entry(b).id, text="First new text here.", cites=_cards(b)),
            UpdateEdit(entry_id=_entry(b).id, text="A second, other text.", cites=_cards(b)),
        ],
    ),
    "empty_text": lambda b: (b, [_add(b, text="   ")]),
    "near_duplicate": lambda b: (b, [_add(b, text=_entry(b).text, scope=_entry(b).scope)]),
    "task_plans_off": lambda b: (
        _mode(b, b.assessment.mode, task_plans=False),
        [
            _add(
                b, kind="plan", scope=f"task:{next(c.task_id for c in b.cards if c.task_type == b.task_type)}"
            )
        ],
    ),
    "grow_add_only": lambda b: (
        _mode(b, ReviewMode.EXPAND, mode="grow"),
        [UpdateEdit(entry_id=_entry(b).id, text="Look inside first.", cites=_cards(b))],
    ),
}
# Rules of the store alone (edit_problems without a review's scopes): no typed edit of a review reaches them.
STORE_ONLY: dict[str, list[object]] = {
    "bad_scope": [AddEdit(kind="skill", scope="somewhere else", text="x", cites=())],
    "not_an_edit": [{"op": "ADD", "text": "a dict, not an edit"}],
}


def perturbation_rows(bundle: ReviserBundle, count: TokenCounter) -> list[dict]:
    """One row per validator rule: the answer that breaks it, whether it was refused and by which rules,
    and whether the reviser's schema would have refused it first."""
    rows = []
    for rule, breaker in PERTURBATIONS.items():
        variant, edits = breaker(bundle)
        problems = check_edits(
            variant.scaffold, edits, variant.assessment, variant.entries, variant.cards, count
        )
        call = revise_call(_prompt(), variant.assessment, variant.cards, variant.entries, _settings(variant))
        answer = {"edits": [e.model_dump(mode="json") for e in call.aliases.to_names(edits)]}
        rules = sorted({rule_of(p) for p in problems})
        rows.append(_row(rule, "review", rules, problems, schema_accepts(call.schema, answer)))
    for rule, objects in STORE_ONLY.items():
        problems = edit_problems(objects, bundle.entries)
        rows.append(_row(rule, "store", sorted({rule_of(p) for p in problems}), problems, None))
    return rows


def _row(rule: str, checked_by: str, rules: list[str], problems: list[str], schema: bool | None) -> dict:
    return {
        "rule": rule,
        "checked_by": checked_by,
        "refused": bool(problems),
        "by_its_rule": rule in rules,
        "rules": rules,
        "message": next((p for p in problems if rule_of(p) == rule), problems[0] if problems else ""),
        "schema_refuses": None if schema is None else not schema,
    }
