"""`pats compile-reviser`: the reviser's DSPy program compiled against recorded bundles, and saved.

Demos are what a good answer looks like on evidence the program will not be scored on: the train split
of reviser bundles (`pats.reviser.bundles`, `split: train`; the shipped ones by default), each rendered
exactly as a review renders it (card names, budget text, verdicts) under the spec's scaffold settings,
answered by the offline rules reviser, and kept only where the review's check accepts that answer
under the spec's settings. The answer and the check are `pats.reviser.score`'s (`rules_answer`,
`problems`), which `pats reviser bench` scores with too.

- `labeled` (the default, no LLM needed): `dspy.LabeledFewShot` with the first `demos` of them:
  answers that add guidance first, then other answers with edits, then empty ones, each the shortest
  first (a small model's context is short: every
  demo is a whole review in the prompt).
- `bootstrap`: `dspy.BootstrapFewShot` runs the program on the train bundles against the spec's
  reviser LLM and keeps the traces `edit_metric` scores 1.0 (first answer accepted, with the rules
  reviser's kinds of edit), up to `demos`.
- `select`: each of those labeled demos alone, and no demo, is a candidate; `dspy.Evaluate` scores
  each candidate's first answers with `edit_metric` against the spec's reviser LLM on the train bundles
  other than the demo's own (a model that copies its demo is not scored on the demo's own review), and
  the best is kept (ties: fewer demos, then the earlier rank). Which demo a small model does best with
  is an empirical question (a DELETE demo and an ADD demo gave 10/10 and 5/10 valid first answers on
  the held-out bundles, 2026-12-04); this answers it on train bundles, never on held-out ones. Every
  candidate's score is saved with the program (`ProgramMeta.selection`).
- `match` (no LLM needed): every labeled demo is kept, and each review is shown only one, of its own
  task type and review mode if there is one, else of its mode, else none
  (`ReviseProgram.demo_for`): a small model copies the kinds of edit its demo makes, so the demo
  should be of a review that calls for the same kinds.

The program is saved with what it was compiled under (`pats.reviser.program.ProgramMeta`); a spec
loads it with `reviser.program: PATH`, and one whose model or scaffold settings differ is refused.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pats.errors import SpecError
from pats.protocols import TokenCounter
from pats.reviser.bundles import ReviserBundle
from pats.reviser.llm import ReviserPrompt, ReviserSettings, load_reviser_prompt, revise_call
from pats.reviser.program import INPUT_FIELDS, Candidate, ProgramMeta, meta_of, new_program
from pats.reviser.score import problems, rules_answer
from pats.spec.models import ExperimentSpec

OPTIMIZERS = ("labeled", "bootstrap", "select", "match")


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
    return [example for _, example in named_demos(spec, bundles, prompt, count)]


def named_demos(
    spec: ExperimentSpec, bundles: Sequence[ReviserBundle], prompt: ReviserPrompt, count: TokenCounter
) -> list[tuple[str, Any]]:
    """`demos`, each with the name of the bundle it came from."""
    import dspy

    settings = settings_of(spec)
    examples = []
    for b in bundles:
        edits = rules_answer(b, spec.scaffold)
        if problems(b, edits, count, spec.scaffold):
            continue
        call = revise_call(prompt, b.assessment, b.cards, b.entries, settings)
        answer = [
            e.model_dump(mode="json") for e in call.aliases.to_names(call.aliases.in_order(edits, b.entries))
        ]
        examples.append((b.name, dspy.Example(**call.inputs, edits=answer).with_inputs(*INPUT_FIELDS)))

    # Answers that add guidance first (the EXPAND and REVISE reviews most steps get; a DELETE demo was
    # copied into reviews that allow no DELETE, and the model then answered nothing), then other
    # answers with edits (an empty set is always valid: demos of it teach the model to say nothing),
    # then the shortest prompt (every demo is a whole review in a small model's context).
    def rank(named) -> tuple[bool, bool, int]:
        ex = named[1]
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
    candidates: int | None = None,
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
            "(pats reviser record RUN_DIR --split train); held-out bundles are never compiled on"
        )
    prompt, settings = load_reviser_prompt(), settings_of(spec)
    selection: list[Candidate] = []
    if optimizer in ("labeled", "match"):  # match keeps every demo and shows each review one
        examples = demos(spec, train, prompt, count)
        kept_k = len(examples) if optimizer == "match" else k
        program = dspy.LabeledFewShot(k=kept_k).compile(new_program(prompt), trainset=examples, sample=False)
        program.match_demos = optimizer == "match"
    elif optimizer == "bootstrap":
        program = _bootstrap(spec, train, prompt, settings, count, k)
    else:
        program, selection = _select(spec, train, prompt, settings, count, candidates)
    kept = len(program.revise.demos)
    return program, meta_of(
        spec.reviser.llm.model, prompt, settings, optimizer, kept, [b.name for b in train], selection
    )


def _scored_examples(spec, train, prompt, settings, count, structured: bool) -> list[Any]:
    """A dspy.Example per train bundle that the program runs on and `edit_metric` scores: the rendered
    inputs, the bundle's check, one answer, the schema when structured output is on, and the rules
    reviser's answer as the metric's reference (whether edits were due)."""
    import dspy

    from pats.lm.schema import response_format

    examples = []
    for b in train:
        call = revise_call(prompt, b.assessment, b.cards, b.entries, settings)

        def check(edits, b=b):
            return problems(b, edits, count, spec.scaffold)

        extra: dict[str, Any] = {"aliases": call.aliases, "check": check, "attempts": 1}
        if structured:
            extra["config"] = {"response_format": response_format("pats_edits", call.schema)}
        reference = rules_answer(b, spec.scaffold)
        examples.append(
            dspy.Example(**call.inputs, **extra, reference=reference).with_inputs(*INPUT_FIELDS, *extra)
        )
    return examples


class _Against:
    """The spec's reviser LLM as DSPy's context (its adapter: JSON under the schema when the endpoint
    takes one), closed after."""

    def __init__(self, spec: ExperimentSpec):
        from pats.lm.caller import LLMCaller

        assert spec.reviser.kind == "llm"
        self.caller = LLMCaller(spec.reviser.llm)
        self.structured = asyncio.run(self.caller.uses_schema())

    def context(self) -> Any:
        import dspy

        adapter = self.caller.schema_adapter() if self.structured else self.caller.adapter
        return dspy.context(lm=self.caller.lm, adapter=adapter)

    def close(self) -> None:
        self.caller.close()


def _bootstrap(spec, train, prompt, settings, count, k: int) -> Any:
    """BootstrapFewShot against the spec's reviser LLM, keeping first answers the check accepts."""
    import dspy

    from pats.reviser.program import edit_metric

    llm = _Against(spec)
    examples = _scored_examples(spec, train, prompt, settings, count, llm.structured)
    optimizer = dspy.BootstrapFewShot(
        metric=edit_metric, metric_threshold=1.0, max_bootstrapped_demos=k, max_labeled_demos=0, max_rounds=1
    )
    try:
        with llm.context():
            return optimizer.compile(new_program(prompt), trainset=examples)
    finally:
        llm.close()


def _select(spec, train, prompt, settings, count, limit: int | None) -> tuple[Any, list[Candidate]]:
    """No demo, and each labeled demo alone (the first `limit` by rank), scored on the train bundles
    by `dspy.Evaluate` with `edit_metric` against the spec's reviser LLM, leaving out the demo's own
    bundle; the best candidate and every candidate's score, the best first."""
    import dspy

    from pats.reviser.program import edit_metric

    named = named_demos(spec, train, prompt, count)[:limit]
    programs = [("", new_program(prompt))]
    for name, example in named:
        one = dspy.LabeledFewShot(k=1).compile(new_program(prompt), trainset=[example], sample=False)
        programs.append((name, one))
    llm = _Against(spec)
    scored = _scored_examples(spec, train, prompt, settings, count, llm.structured)
    names = [b.name for b in train]
    concurrency = spec.reviser.llm.concurrency
    results = []
    try:
        with llm.context():
            for n, (demo, program) in enumerate(programs):
                evaluate = dspy.Evaluate(
                    devset=scored, metric=edit_metric, num_threads=concurrency, max_errors=len(scored) + 1,
                    display_progress=False, provide_traceback=False,
                )  # fmt: skip
                per_bundle = [float(score) for _, _, score in evaluate(program).results]
                kept = [s for name, s in zip(names, per_bundle, strict=True) if name != demo]
                candidate = Candidate(demo=demo, score=sum(kept) / len(kept), scored=len(kept))
                print(
                    f"candidate {n + 1}/{len(programs)}: demo {demo or '(none)'}: {candidate.score:.3f} "
                    f"over {candidate.scored} train bundles",
                    file=sys.stderr,
                    flush=True,
                )
                results.append((candidate, n, program))
    finally:
        llm.close()
    # Best score; ties go to fewer demos (no demo is candidate 0), then the demo's earlier rank.
    results.sort(key=lambda r: (-r[0].score, r[1]))
    return results[0][2], [candidate for candidate, _, _ in results]
