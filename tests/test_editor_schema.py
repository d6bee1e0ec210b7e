"""What an editor says with schemas/experiment.schema.json: `${...}` accepted in typed fields, and a
section of several kinds checked as the kind it names, not "not valid under any of the given
schemas" (issue 25); and with schemas/sweep.schema.json: every file of experiments/ checked by an
independent validator (jsonschema) against the schema docs/specs.md maps it to, and against the
experiment schema, which an editor mapping all of experiments/ to it applies (issue 59, item 21)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from pats.spec import load_spec
from pats.sweep.grid import is_sweep_file, load_sweep_file

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "schemas" / "experiment.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
SWEEP_VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((REPO / "schemas" / "sweep.schema.json").read_text())
)
FILES = sorted(p.relative_to(REPO) for p in (REPO / "experiments").rglob("*.yaml"))
SWEEPS = [p for p in FILES if is_sweep_file(REPO / p)]
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


def errors(validator, data) -> list[str]:
    return sorted(e.message for e in validator.iter_errors(data))


def test_the_schemas_are_valid_json_schema():
    for validator in (VALIDATOR, SWEEP_VALIDATOR):
        validator.check_schema(validator.schema)


@pytest.mark.parametrize("path", FILES, ids=str)
def test_every_file_of_experiments_fits_its_schema_and_the_experiment_schema(path):
    """docs/specs.md's mapping: experiments/sweeps/*.yaml to the sweep schema, every other file to the
    experiment schema; the experiment schema also takes the sweep files (an editor mapping all of
    experiments/ to it checks them as sweep files, not as specs missing `name`)."""
    data = yaml.safe_load((REPO / path).read_text())
    sweep = is_sweep_file(REPO / path)
    assert sweep == (path.parts[:2] == ("experiments", "sweeps")), "the mapping docs/specs.md gives"
    assert errors(SWEEP_VALIDATOR if sweep else VALIDATOR, data) == []
    assert errors(VALIDATOR, data) == []
    if not sweep:  # a spec is no sweep file
        assert "'sweep' is a required property" in errors(SWEEP_VALIDATOR, data)


def test_there_are_sweep_files_and_the_loader_agrees():
    assert [p.name for p in SWEEPS] == ["ablations.yaml", "demonstration.yaml", "stage1.yaml", "stage2.yaml"]
    for path in SWEEPS:
        load_sweep_file(REPO / path)


@pytest.mark.parametrize("validator", [SWEEP_VALIDATOR, VALIDATOR], ids=["sweep schema", "experiment schema"])
def test_a_sweep_file_is_checked_as_a_sweep_file(validator):
    """Both schemas report a sweep file's own mistakes, each by its sweep key, and nothing about a spec."""
    assert errors(validator, {"sweep": {"specs": ["a.yaml"], "sedes": [0]}}) == [
        "Additional properties are not allowed ('sedes' was unexpected)"
    ]
    assert errors(validator, {"sweep": {"specs": [], "order": "cell", "cpus": 0}}) == [
        "'cell' is not one of ['spec', 'seed']",
        "0 is less than or equal to the minimum of 0",
        "[] should be non-empty",
    ]
    assert errors(validator, {"sweep": {"specs": ["a.yaml"], "grid": {"trainer.lr": [0.0001]}}}) == [
        "0.0001 is not of type 'string'"  # as the loader refuses it: grid values are written as text
    ]
    assert errors(validator, {"sweep": {"specs": ["a.yaml"]}, "name": "x"}) == [
        "Additional properties are not allowed ('name' was unexpected)"
    ]
    assert errors(validator, {"sweep": {"seeds": [0]}}) == ["'specs' is a required property"]


def test_a_sweep_section_with_models_of_its_own_keeps_their_definitions():
    """The sweep section's model is passed in (pats.sweep imports pats.spec): the definitions of models
    nested in it move to the schema's own, where its references find them."""
    from pydantic import BaseModel

    from pats.spec.schema import sweep_schema_text

    class Inner(BaseModel):
        x: int

    class Outer(BaseModel):
        inner: Inner

    validator = jsonschema.Draft202012Validator(json.loads(sweep_schema_text(Outer)))
    assert errors(validator, {"sweep": {"inner": {"x": 1}}}) == []
    assert errors(validator, {"sweep": {"inner": {"x": "a"}}}) == ["'a' is not of type 'integer'"]
