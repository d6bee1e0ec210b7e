"""The reviser benchmark's tables (pats.reviser.bench_table) on crafted rows, read whole: an accepted
set, a refused one and a fault of an LLM reviser; the rules reviser, whose kinds are the reference
("-"); two side by side; the head with the k/N column `pats reviser bench` prints before each line.
No server, no model: the command's own tests are in tests/test_reviser_command.py."""

from __future__ import annotations

import pytest

from pats.lm.caller import usd_cost
from pats.reviser.bench_table import head, line, side_by_side, table
from pats.reviser.score import BundleScore

BASE = {"environment": "twx", "task_type": "twc", "mode": "REVISE"}
OK = BundleScore(bundle="twx-a", **BASE, parsed=True, answers=1, valid_after_retry=True, proposed=1, valid_edits=1,
                 set_valid=True, ops=("ADD",), rules_ops=("ADD", "DELETE"), kinds_as_rules=0.5, tokens_before=10,
                 tokens_after=14, calls=1, llm_tokens=120, prompt_tokens=100, completion_tokens=20, seconds=1.5)  # fmt: skip
REFUSED = BundleScore(bundle="twx-b", **BASE, parsed=True, answers=2, proposed=2, valid_edits=1,
                      rules=("unknown_card", "unknown_card", "too_few_citations"), ops=("ADD", "UPDATE"),
                      rules_ops=("DELETE",), tokens_before=10, tokens_after=12, calls=2, llm_tokens=300,
                      prompt_tokens=250, completion_tokens=50, seconds=3.25)  # fmt: skip
FAULT = BundleScore(bundle="twx-c", **BASE, parsed=False, error="m: no usable answer", fault="timeout",
                    tokens_before=5, tokens_after=5, calls=1, seconds=60.0)  # fmt: skip
NO_CALL = {"calls": 0, "llm_tokens": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}

LLM_TABLE = [
    "== llm",
    "bundle                                         mode     first    retry edits    kinds/rules  prompt  compl      s     USD fault         refused by",
    "twx-a                                          REVISE   ok       ok      1/1      A/AD 0.50     100     20    1.5       - -",
    "twx-b                                          REVISE   refused  -       1/2           AU/D     250     50    3.2       - -             too_few_citations,unknown_card",
    "twx-c                                          REVISE   fault    -       0/0            -/-       0      0   60.0       - timeout",
    "llm: valid at the first answer 1/3, after the retry 1/3 (parsed 2/3, edits valid 2/3); faults 1/3 (timeout x1); refused by unknown_card x2, too_few_citations x1; kinds of edit as the rules' 0.50 over 1 accepted sets;",
    "  scaffold tokens, summed over the 3 bundles, 25 -> 31; 350 prompt + 70 completion tokens over 4 calls, 16.2 s per call; USD unknown (LiteLLM's offline cost map does not know hosted_vllm/m)",
]

RULES_TABLE = [
    "== rules",
    "bundle                                         mode     first    retry edits    kinds/rules  prompt  compl      s     USD fault         refused by",
    "twx-a                                          REVISE   ok       ok      1/1              -     100     20    1.5       - -",
    "rules: valid at the first answer 1/1, after the retry 1/1 (parsed 1/1, edits valid 1/1); faults 0/1; refused by no rule; the reference of the kinds of edit;",
    "  scaffold tokens, summed over the 1 bundles, 10 -> 14; 100 prompt + 20 completion tokens over 1 calls, 1.5 s per call; USD unknown (no model named to price)",
]

SIDE_BY_SIDE = [
    "                                                        | A: llm                                                               | B: rules",
    "bundle                                         mode     | first    retry    kinds/rules     tokens      s     USD fault        | first    retry    kinds/rules     tokens      s     USD fault",
    "twx-a                                          REVISE   | ok       ok         A/AD 0.50     100+20    1.5       - -            | ok       ok                 -        0+0    0.0  0.0000 -",
    "twx-c                                          REVISE   | fault    -                -/-        0+0   60.0       - timeout      | ok       ok                 -        0+0    0.0  0.0000 -",
    "A llm: valid at the first answer 1/2, after the retry 1/2 (parsed 1/2, edits valid 1/1); faults 1/2 (timeout x1); refused by no rule; kinds of edit as the rules' 0.50 over 1 accepted sets;",
    "  scaffold tokens, summed over the 2 bundles, 15 -> 19; 100 prompt + 20 completion tokens over 2 calls, 30.8 s per call; USD unknown (LiteLLM's offline cost map does not know hosted_vllm/m)",
    "B rules: valid at the first answer 2/2, after the retry 2/2 (parsed 2/2, edits valid 2/2); faults 0/2; refused by no rule; the reference of the kinds of edit;",
    "  scaffold tokens, summed over the 2 bundles, 20 -> 28; 0 prompt + 0 completion tokens over 0 calls, 0.0 s per bundle; USD 0.0000",
]


def test_an_llms_table_has_its_faults_apart_from_the_refusing_rules():
    assert table("llm", [OK, REFUSED, FAULT], "hosted_vllm/m").splitlines() == LLM_TABLE


def test_the_rules_reviser_is_the_reference_of_the_kinds():
    assert table("rules", [OK], None).splitlines() == RULES_TABLE


def test_two_revisers_side_by_side():
    rules = [OK.model_copy(update=NO_CALL), OK.model_copy(update={**NO_CALL, "bundle": "twx-c"})]
    assert (
        side_by_side(("llm", [OK, FAULT], "hosted_vllm/m"), ("rules", rules, None)).splitlines()
        == SIDE_BY_SIDE
    )
    with pytest.raises(
        ValueError, match="^side_by_side compares rows of the same bundles, in the same order$"
    ):
        side_by_side(("llm", [OK, FAULT], "hosted_vllm/m"), ("rules", rules[::-1], None))


def test_the_head_leaves_room_for_the_progress_column():
    assert head("llm", 5).splitlines() == ["== llm", " " * 6 + LLM_TABLE[1]]
    assert head("llm") == "\n".join(LLM_TABLE[:2])


def test_a_priced_model_and_a_row_written_before_faults_had_a_kind():
    usd = usd_cost("openai/gpt-4o-mini", 100, 20)
    assert usd is not None and f" {usd:.4f} " in line(OK, "openai/gpt-4o-mini")
    old = FAULT.model_copy(update={"fault": ""})
    assert line(old, "hosted_vllm/m").endswith("  60.0       - other"), "an unparsed row is a fault"
    assert "USD 0.0000" in table("rules", [OK.model_copy(update=NO_CALL)], None)


def test_the_side_by_side_head_keeps_its_columns_with_progress_and_long_labels():
    from pats.reviser.bench_table import pair_head

    assert pair_head("llm", "rules", 5).splitlines() == [" " * 6 + line for line in SIDE_BY_SIDE[:2]]
    top, names = pair_head("a" * 100, "b" * 100).splitlines()
    assert top.index("| A: ") == names.index("| first") and top.index("| B: ") == names.rindex("| first")
    assert top.endswith(" | B: " + "b" * (names.rindex("| first") - names.index("| first") - 6))


def test_counts_are_said_most_first_then_by_name():
    from collections import Counter

    from pats.reviser.bench_table import counted

    assert counted(Counter({"b": 1, "a": 1, "c": 2})) == "c x2, a x1, b x1"
