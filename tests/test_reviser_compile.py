"""`pats compile-reviser --optimizer match` with more train bundles than `k` (issue 59, item 20): every
labeled demo is kept, not the first k, so each review of another task type or mode finds its own."""

from __future__ import annotations

from pats.reviser.bundles import SHIPPED, load
from pats.reviser.compile import compile_program, named_demos, settings_of
from pats.reviser.llm import load_reviser_prompt, revise_call
from pats.spec import load_spec

# Five reviews whose rules answers the review's check accepts, each of its own task type and mode.
OWN = {
    "twx-twc-compress-s21-s0-twc": ("twc", "REVISE"),
    "twx-s2-twc": ("twc", "EXPAND"),
    "twx-twc-compress-s12-s2-twc": ("twc", "COMPRESS"),
    "search_qa-s2-popqa": ("popqa", "EXPAND"),
    "twx-twc-prune-s23-s0-twc": ("twc", "PRUNE"),
}


def words(text: str) -> int:
    return len(text.split())


def test_match_keeps_every_demo_when_there_are_more_than_k():
    spec = load_spec(
        "experiments/quickstart.yaml", ["reviser.kind=llm", "reviser.llm.model=hosted_vllm/match"]
    )
    train = [b.model_copy(update={"split": "train"}) for b in load(SHIPPED, list(OWN))]
    prompt = load_reviser_prompt()
    ranked = [name for name, _ in named_demos(spec, train, prompt, words)]
    assert sorted(ranked) == sorted(OWN), "every review's rules answer is a demo"
    for k in (2, 1):  # k is the labeled optimizer's; match keeps all five whatever it is
        program, meta = compile_program(spec, train, words, optimizer="match", k=k)
        assert meta.demos == len(program.revise.demos) == 5 and program.match_demos
    settings = settings_of(spec)
    for b in train:  # the PRUNE review's demo (no edits) ranks last: a program of the first k lacks it
        inputs = revise_call(prompt, b.assessment, b.cards, b.entries, settings).inputs
        (demo,) = program.demo_for(inputs)
        assert (demo["task_type"], demo["mode"]) == OWN[b.name]
        assert demo["review"] == inputs["review"], b.name
