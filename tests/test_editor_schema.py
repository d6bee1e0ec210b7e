"""What an editor says with schemas/experiment.schema.json: `${...}` accepted in typed fields, and a
section of several kinds checked as the kind it names, not "not valid under any of the given
schemas" (issue 25)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from pats.spec import load_spec

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "schemas" / "experiment.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
BASE = "name: x\nenvironment: {kind: twx, num_eval_tasks: 8}\n"


def messages(text: str) -> list[str]:
    return sorted(e.message for e in VALIDATOR.iter_errors(yaml.safe_load(text)))


@pytest.mark.parametrize(
    "extra",
    [
        "eval: {num_tasks: '${environment.num_eval_tasks}'}\n",
        "trainer: {steps: '${oc.env:STEPS,5}', group_size: 4}\n",
        "scaffold: {cards: ['${oc.env:CARD,outcome}'], probe_fraction: '${oc.env:P,0.25}'}\n",
        "name: '${oc.env:RUN_NAME,x}'\n",
    ],
)
def test_an_interpolation_fits_a_typed_field_as_the_loader_resolves_it(extra, write):
    text = BASE + extra if not extra.startswith("name:") else extra + BASE.split("\n", 1)[1]
    assert messages(text) == []
    load_spec(write("s.yaml", text))  # and the loader agrees


def test_a_wrong_value_is_still_flagged():
    assert messages(BASE + "trainer: {steps: five}\n") == ["'five' is not of type 'integer'"]
    # A `$` string that is no `${...}` is a wrong value, reported by the field's own type.
    assert messages(BASE + "trainer: {steps: '$notinterp'}\n") == ["'$notinterp' is not of type 'integer'"]
    assert messages(BASE + "trainer: {steps: '${x'}\n") == ["'${x' is not of type 'integer'"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("judge: {kind: oracle}\n", "'oracle' is not one of ['stats', 'llm']"),
        (
            "judge: {kind: llm, llm: {model: openai/x, tempreature: 0}}\n",
            "Additional properties are not allowed",
        ),
        ("judge: {ema_alpha: 2}\n", "2 is greater than the maximum of 1.0"),  # no kind: stats, the default
        (
            "trainer: {backend: verl, stepz: 3}\n",
            "Additional properties are not allowed ('stepz' was unexpected)",
        ),
        ("environment: {kind: search_qa, retriever: {kind: bm25}}\n", "'corpus' is a required property"),
    ],
)
def test_a_section_of_several_kinds_is_checked_as_the_kind_it_names(extra, said):
    found = messages(("name: x\n" if extra.startswith("environment") else BASE) + extra)
    assert any(said in m for m in found), found
    assert not any("any of the given schemas" in m for m in found), found


def test_an_overlay_may_leave_the_kind_to_its_base():
    assert messages("defaults: [base.yaml]\njudge: {llm: {model: openai/x}}\n") == []
    # ... but a kind it names is checked as that kind, for that kind's keys only.
    assert messages("defaults: [base.yaml]\njudge: {kind: llm, nope: 1}\n") == [
        "Additional properties are not allowed ('nope' was unexpected)"
    ]
