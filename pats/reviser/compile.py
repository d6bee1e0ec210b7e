"""`pats compile-reviser`: the reviser's DSPy program compiled against recorded bundles, and saved.

Demos are what a good answer looks like on evidence the program will not be scored on: the train split
of reviser bundles (`pats.reviser.bundles`, `split: train`), each rendered exactly as a review renders
it (card names, budget text, verdicts) under the spec's scaffold settings, answered by the offline
rules reviser, and kept only where the review's check accepts that answer under the spec's settings.

- `labeled` (the default, no LLM needed): `dspy.LabeledFewShot` with the first `demos` of them:
  answers that add guidance first, then other answers with edits, then empty ones, each the shortest
  first (a small model's context is short: every
  demo is a whole review in the prompt).
- `bootstrap`: `dspy.BootstrapFewShot` runs the program on the train bundles against the spec's
  reviser LLM and keeps the traces `edit_metric` scores 1.0 (first answer accepted), up to `demos`.

The program is saved with what it was compiled under (`pats.reviser.program.ProgramMeta`); a spec
loads it with `reviser.program: PATH`, and one whose model or scaffold settings differ is refused.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pats.errors import SpecError
from pats.protocols import TokenCounter
from pats.reviser.bundles import ReviserBundle
from pats.reviser.llm import ReviserPrompt, ReviserSettings, load_reviser_prompt, revise_call
from pats.reviser.program import INPUT_FIELDS, ProgramMeta, meta_of, new_program
from pats.spec.models import ExperimentSpec

OPTIMIZERS = ("labeled", "bootstrap")


def settings_of(spec: ExperimentSpec) -> ReviserSettings:
    return ReviserSettings.of(spec.scaffold)


def default_out(spec: ExperimentSpec) -> Path:
    """programs/reviser-<model>.json: one compiled program per reviser model."""
    assert spec.reviser.kind == "llm"
    return Path("programs") / f"reviser-{re.sub(r'[^A-Za-z0-9._-]+', '_', spec.reviser.llm.model)}.json"


def demos(
    spec: ExperimentSpec, bundles: Sequence[ReviserBundle], prompt: ReviserPrompt, count: TokenCounter
) -> list[Any]:
    """A dspy.Example per train bundle whose rules answer the review's check accepts under the spec's
    settings: the rendered inputs and that answer (card names), answers with edits first, then the
    shortest prompt."""
    import dspy

    from pats.review import check_edits
    from pats.reviser.rules import RulesReviser

    settings = settings_of(spec)
    rules = RulesReviser.for_scaffold(spec.scaffold)
    examples = []
    for b in bundles:
        edits = asyncio.run(rules.revise(b.step, b.assessment, b.cards, b.entries))
        if check_edits(spec.scaffold, edits, b.assessment, b.entries, b.cards, count):
            continue
        call = revise_call(prompt, b.assessment, b.cards, b.entries, settings)
        answer = [
            e.model_dump(mode="json") for e in call.aliases.to_names(call.aliases.in_order(edits, b.entries))
        ]
        examples.append(dspy.Example(**call.inputs, edits=answer).with_inputs(*INPUT_FIELDS))

    # Answers that add guidance first (the EXPAND and REVISE reviews most steps get; a DELETE demo was
    # copied into reviews that allow no DELETE, and the model then answered nothing), then other
    # answers with edits (an empty set is always valid: demos of it teach the model to say nothing),
    # then the shortest prompt (every demo is a whole review in a small model's context).
    def rank(ex) -> tuple[bool, bool, int]:
        adds = any(e["op"] == "ADD" for e in ex.edits)
        return (not adds, not ex.edits, sum(len(ex[f]) for f in INPUT_FIELDS))

    return sorted(examples, key=rank)


def compile_program(
    spec: ExperimentSpec,
    bundles: Sequence[ReviserBundle],
    count: TokenCounter,
    *,
    optimizer: str = "labeled",
    k: int = 2,
) -> tuple[Any, ProgramMeta]:
    """The compiled program and what it was compiled under."""
    import dspy

    if spec.reviser.kind != "llm":
        raise SpecError(
            "reviser.kind is rules: compile-reviser compiles an LLM reviser; set reviser.kind: llm"
        )
    if optimizer not in OPTIMIZERS:
        raise SpecError(f"--optimizer {optimizer}: choose one of {', '.join(OPTIMIZERS)}")
    train = [b for b in bundles if b.split == "train"]
    if not train:
        raise SpecError(
            "no train bundles: compile against bundles recorded with --split train "
            "(python bench/reviser.py --record RUN_DIR --split train); held-out bundles are never compiled on"
        )
    prompt, settings = load_reviser_prompt(), settings_of(spec)
    examples = demos(spec, train, prompt, count)
    if optimizer == "labeled":
        program = dspy.LabeledFewShot(k=k).compile(new_program(prompt), trainset=examples, sample=False)
    else:
        program = _bootstrap(spec, train, prompt, settings, count, k)
    kept = len(program.revise.demos)
    return program, meta_of(
        spec.reviser.llm.model, prompt, settings, optimizer, kept, [b.name for b in train]
    )


def _bootstrap(spec, train, prompt, settings, count, k: int) -> Any:
    """BootstrapFewShot against the spec's reviser LLM, keeping first answers the check accepts."""
    import dspy

    from pats.lm import LLMCaller, response_format
    from pats.review import check_edits
    from pats.reviser.program import edit_metric
    from pats.reviser.rules import RulesReviser

    assert spec.reviser.kind == "llm"
    caller = LLMCaller(spec.reviser.llm)
    structured = asyncio.run(caller.uses_schema())
    rules = RulesReviser.for_scaffold(spec.scaffold)
    examples = []
    for b in train:
        call = revise_call(prompt, b.assessment, b.cards, b.entries, settings)

        def check(edits, b=b):
            return check_edits(spec.scaffold, edits, b.assessment, b.entries, b.cards, count)

        extra: dict[str, Any] = {"aliases": call.aliases, "check": check, "attempts": 1}
        if structured:
            extra["config"] = {"response_format": response_format("pats_edits", call.schema)}
        # The metric's reference: whether the rules reviser wrote edits for this bundle.
        reference = asyncio.run(rules.revise(b.step, b.assessment, b.cards, b.entries))
        examples.append(
            dspy.Example(**call.inputs, **extra, reference=reference).with_inputs(*INPUT_FIELDS, *extra)
        )
    adapter = caller._json_adapter() if structured else caller.adapter
    optimizer = dspy.BootstrapFewShot(
        metric=edit_metric, metric_threshold=1.0, max_bootstrapped_demos=k, max_labeled_demos=0, max_rounds=1
    )
    try:
        with dspy.context(lm=caller.lm, adapter=adapter):
            return optimizer.compile(new_program(prompt), trainset=examples)
    finally:
        caller.close()
