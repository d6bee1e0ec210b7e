"""The reviser benchmark (`pats reviser bench`): one reviser on recorded bundles, counted per bundle and
in total, so that a user who swaps the reviser's LLM sees what it does before paying for a training run.

A `Contender` is the offline rules reviser or an LLM (a LiteLLM model string, hosted or self-hosted)
with an optional compiled program. Each bundle (`pats.reviser.bundles`; the shipped ones are
`SHIPPED`) is given to it as the review gives it and scored by `pats.reviser.score`: valid at the first
answer and after the retry, the rules that refused the others, its kinds of edit against the rules
reviser's, prompt and completion tokens, seconds, and USD by LiteLLM's offline cost map (`usd`: None,
with the reason, for a model the map does not know, such as any self-hosted one). Before the first
bundle, the command checks the LLM as `pats run` does and decides `structured: auto` by pats' own
probe (pats.cli.reviser.preflight), so that no bundle's row counts it.

A result (`result`) is what bench/studies/reviser.py has written to bench/results/reviser/ since the
benchmark began: meta, `summary` (`BenchSummary`) and `rows` (`BundleScore`).
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from pats.protocols import TokenCounter
from pats.reviser.bundles import ReviserBundle
from pats.reviser.llm import LLMReviser
from pats.reviser.prompt import ReviserSettings
from pats.reviser.rules import RulesReviser
from pats.reviser.score import BundleScore, bundle_check, score
from pats.spec.models import LLMSpec
from pats.types import Record


class Contender(Record):
    """A reviser the benchmark scores: the rules reviser (no `llm`) or an LLM with an optional program."""

    label: str  # names its result file and its column
    llm: LLMSpec | None = None
    program: str | None = None  # a compiled program (`pats compile-reviser`); None: the uncompiled one

    @property
    def kind(self) -> str:
        return "rules" if self.llm is None else "llm"

    @property
    def model(self) -> str | None:
        """The LiteLLM model string its tokens are priced by; None for the rules reviser."""
        return None if self.llm is None else self.llm.model


class BenchSummary(Record):
    """A contender's rows counted, as results have held them under `summary`."""

    bundles: int
    parsed: int
    sets_valid: int  # at the first answer
    sets_valid_after_retry: int
    edits_proposed: int
    edits_valid: int
    citations_valid: int
    tokens_before: int
    tokens_after: int
    calls: int
    tokens_per_call: float
    seconds_per_call: float  # per bundle for the rules reviser, which makes no call
    refusing_rules: tuple[str, ...]
    kinds_as_rules: float | None  # mean over the accepted sets (since 2026-12-05); None: none accepted
    kinds_as_rules_sets: int
    prompt_tokens: int
    completion_tokens: int
    usd: float | None  # all calls together; None: not priced, `usd_note` says why
    usd_note: str


def cost(rows: Sequence[BundleScore], model: str | None) -> tuple[float | None, str]:
    """(USD, why not): the rows' LLM tokens priced by LiteLLM's offline cost map; 0 without LLM calls
    (the rules reviser), None with the reason where they cannot be priced."""
    if not any(r.calls for r in rows):
        return 0.0, "no LLM calls"
    if model is None:
        return None, "no model named to price"
    if any(r.llm_tokens != r.prompt_tokens + r.completion_tokens for r in rows):
        return None, "rows without prompt and completion tokens apart"
    from pats.lm.caller import usd_cost

    usd = usd_cost(model, sum(r.prompt_tokens for r in rows), sum(r.completion_tokens for r in rows))
    return (usd, "") if usd is not None else (None, f"LiteLLM's offline cost map does not know {model}")


def summarize(rows: Sequence[BundleScore], model: str | None = None) -> BenchSummary:
    """The rows counted; `model` (the LLM's LiteLLM model string, None for the rules) prices them."""
    calls = sum(r.calls for r in rows)
    usd, why = cost(rows, model)
    kinds = [r.kinds_as_rules for r in rows if r.kinds_as_rules is not None]
    seconds = sum(r.seconds for r in rows)
    return BenchSummary(
        bundles=len(rows),
        parsed=sum(r.parsed for r in rows),
        sets_valid=sum(r.set_valid for r in rows),
        sets_valid_after_retry=sum(r.valid_after_retry for r in rows),
        edits_proposed=sum(r.proposed for r in rows),
        edits_valid=sum(r.valid_edits for r in rows),
        citations_valid=sum(bool(r.citations_valid) for r in rows if r.parsed),
        tokens_before=sum(r.tokens_before for r in rows),
        tokens_after=sum(r.tokens_after for r in rows),
        calls=calls,
        tokens_per_call=sum(r.llm_tokens for r in rows) / calls if calls else 0.0,
        seconds_per_call=seconds / calls if calls else seconds / max(len(rows), 1),
        refusing_rules=tuple(sorted({rule for r in rows for rule in r.rules})),
        kinds_as_rules=mean(kinds) if kinds else None,
        kinds_as_rules_sets=len(kinds),
        prompt_tokens=sum(r.prompt_tokens for r in rows),
        completion_tokens=sum(r.completion_tokens for r in rows),
        usd=usd,
        usd_note=why,
    )


def reviser_for(
    contender: Contender, bundle: ReviserBundle, count: TokenCounter
) -> RulesReviser | LLMReviser:
    """The contender under the bundle's run settings; an LLM gets the bundle's check, so its program
    asks once more when the first answer is refused, as in training."""
    if contender.llm is None:
        return RulesReviser.for_scaffold(bundle.scaffold)
    from pats.spec.models import LLMReviserSpec

    spec = LLMReviserSpec(llm=contender.llm, program=contender.program)
    return LLMReviser(spec, ReviserSettings.of(bundle.scaffold), check=bundle_check(bundle, count))


def run(
    contender: Contender,
    bundles: Sequence[ReviserBundle],
    after_each: Callable[[list[BundleScore]], None] = lambda rows: None,
) -> list[BundleScore]:
    """Every bundle scored in turn; `after_each` gets the rows so far (a run stopped part way keeps
    what it scored when it writes them there). Scaffold tokens are counted with each bundle's policy
    tokenizer."""
    return run_together([contender], bundles, lambda rows: after_each(rows[0]))[0]


def run_together(
    contenders: Sequence[Contender],
    bundles: Sequence[ReviserBundle],
    after_each: Callable[[list[list[BundleScore]]], None] = lambda rows: None,
) -> list[list[BundleScore]]:
    """Each bundle scored by every contender before the next bundle, so that two revisers side by side
    show each bundle's line once, as it is scored; `after_each` gets each contender's rows so far."""
    from pats.models import token_counter

    counters: dict[str, TokenCounter] = {}
    rows: list[list[BundleScore]] = [[] for _ in contenders]
    for b in bundles:
        if b.policy_model not in counters:
            counters[b.policy_model] = token_counter(b.policy_model)
        for contender, scored in zip(contenders, rows, strict=True):
            reviser = reviser_for(contender, b, counters[b.policy_model])
            try:
                scored.append(score(b, reviser, counters[b.policy_model]))
            finally:
                if isinstance(reviser, LLMReviser):
                    reviser.caller.close()
        after_each(rows)
    return rows


def only_faults(rows: Sequence[BundleScore]) -> bool:
    """No bundle scored, because every answer was a fault (a timeout, an HTTP error, a malformed
    answer): what `pats reviser bench` exits 1 on."""
    return bool(rows) and all(r.fault for r in rows)


def meta(contender: Contender, bundles_folder: str, structured_asked: str | None = None) -> dict[str, Any]:
    """What a result says about how it was measured (before its label, summary and rows)."""
    out: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "first_attempt_only": True,  # every column is of the first answer but `valid_after_retry`
        "bundles_folder": bundles_folder,
        "reviser": contender.kind,
    }
    if contender.llm is not None:
        out["llm"] = contender.llm.model_dump(mode="json")
        out["program"] = contender.program
        out["structured_asked"] = structured_asked
    return out


def result(
    head: dict[str, Any], label: str, rows: Sequence[BundleScore], total: int, model: str | None
) -> dict:
    """A result file's content: `head` (`meta`), the label, whether every one of `total` bundles was
    scored, the summary and the rows."""
    return {
        **head,
        "label": label,
        "complete": len(rows) == total,
        "summary": summarize(rows, model).model_dump(mode="json"),
        "rows": [r.model_dump(mode="json") for r in rows],
    }


def in_checkout(path: Path, root: Path) -> str:
    """`path` relative to `root` when inside it: a result names no one machine's paths."""
    path = path.resolve()
    return str(path.relative_to(root) if path.is_relative_to(root) else path)
