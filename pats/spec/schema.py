"""JSON Schema of `ExperimentSpec` and of sweep files, for editors (yaml-language-server) and the drift
test: `pats schema` writes both (`schema_texts`), docs/specs.md says which files map to which.

A sweep file (one top-level key, `sweep:`) is checked by the sweep schema, and by the experiment schema
too, which hands a file with `sweep:` to the same definition: an editor that maps every YAML file of
experiments/ to the experiment schema (the natural setting) checks a sweep file as a sweep file. The
sweep section's model (pats.sweep.grid.SweepSpec) is passed in: pats.sweep imports pats.spec.

A spec with `defaults:` is an overlay on its bases, so nothing in it is required: it is checked
against `PartialExperimentSpec`, a copy of the models' schema without `required`.

Sections of several kinds (environment, judge, reviser, trainer, retriever) are checked by their tag:
`kind: <one of>` (or `backend:`), then an `if kind is X then X's schema` per kind, so an editor reports
the unknown kind or the bad key of the kind written, not "not valid under any of the given schemas".
Without the tag the section is the default kind (the models list it first: judge stats, reviser rules,
trainer local); in an overlay the base may set the tag, so there it may be any kind.

Typed values (numbers, booleans, choices, patterned text) also accept a `${...}` interpolation, which
the loader resolves before validation (`num_tasks: ${environment.num_eval_tasks}`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from pats.spec.models import ExperimentSpec

SCHEMA_PATH = "schemas/experiment.schema.json"
SWEEP_SCHEMA_PATH = "schemas/sweep.schema.json"
DEFAULTS = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Base spec files this one extends, relative to this file; later wins.",
}


INTERPOLATION = {
    "type": "string",
    "pattern": r"\$\{.+\}",
    "description": "A ${...} interpolation, resolved by the loader before validation.",
}
TAGS = ("kind", "backend")


def schema_texts(sweep: type[BaseModel]) -> dict[str, str]:
    """Every schema `pats schema` writes: path -> text. `sweep`: the `sweep:` section's model."""
    return {SCHEMA_PATH: schema_text(sweep), SWEEP_SCHEMA_PATH: sweep_schema_text(sweep)}


def schema_text(sweep: type[BaseModel]) -> str:
    root = _any_of(ExperimentSpec.model_json_schema(mode="validation"))
    defs = root.pop("$defs")
    # `defaults:` is consumed by the loader before validation, so the models do not know it.
    root["properties"] = {"defaults": DEFAULTS, **root["properties"]}
    title = root.pop("title")
    models = {title: root, **defs}
    partial = {f"Partial{name}": _by_tag(_partial(body), models, True) for name, body in models.items()}
    full = {name: _by_tag(body, models, False) for name, body in models.items()}
    every = {name: _interpolable(body) for name, body in {**full, **partial}.items()}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pats experiment spec",
        "description": "A full spec, or with `defaults:` an overlay on base specs (nothing required); "
        "a file with `sweep:` is a sweep file (schemas/sweep.schema.json).",
        "if": {"required": ["sweep"]},
        "then": {"$ref": f"#/$defs/{SWEEP_FILE}"},
        "else": {
            "if": {"required": ["defaults"]},
            "then": {"$ref": f"#/$defs/Partial{title}"},
            "else": {"$ref": f"#/$defs/{title}"},
        },
        "$defs": {**every, "Interpolation": INTERPOLATION, **_sweep_defs(sweep)},
    }
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


SWEEP_FILE = "SweepFile"


def sweep_schema_text(sweep: type[BaseModel]) -> str:
    """A sweep file: one key, `sweep:`, holding `sweep`'s fields. Its values are read as written (the
    sweep loader resolves no `${...}`)."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pats sweep file",
        "description": "One key, `sweep:`: spec files x seeds x overrides (docs/ablations.md).",
        "$ref": f"#/$defs/{SWEEP_FILE}",
        "$defs": _sweep_defs(sweep),
    }
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def _sweep_defs(sweep: type[BaseModel]) -> dict[str, Any]:
    section = _any_of(sweep.model_json_schema(mode="validation"))
    defs = section.pop("$defs", {})
    name = section.pop("title")
    file = {
        "type": "object",
        "description": "A sweep file: its one top-level key is `sweep`.",
        "properties": {"sweep": {"$ref": f"#/$defs/{name}"}},
        "required": ["sweep"],
        "additionalProperties": False,
    }
    return {SWEEP_FILE: file, name: section, **defs}


def _by_tag(node: Any, defs: dict, partial: bool) -> Any:
    """Each union of tagged models (`anyOf` of `$ref`s sharing a kind/backend const) as tag-checked
    `if`/`then` branches (see the module docstring)."""
    if isinstance(node, list):
        return [_by_tag(v, defs, partial) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _by_tag(v, defs, partial) for k, v in node.items()}
    refs = [o.get("$ref") for o in node.get("anyOf", [])]
    if len(refs) < 2 or not all(isinstance(r, str) for r in refs):
        return node
    models = [defs.get(r.rsplit("/", 1)[-1].removeprefix("Partial"), {}) for r in refs]
    tag = next((t for t in TAGS if all(t in m.get("properties", {}) for m in models)), None)
    if tag is None:
        return node
    kinds = [m["properties"][tag].get("const") for m in models]
    branches: list[dict] = [
        {"if": {"properties": {tag: {"const": k}}, "required": [tag]}, "then": {"$ref": r}}
        for k, r in zip(kinds, refs, strict=True)
    ]
    out = {k: v for k, v in node.items() if k not in ("anyOf", "discriminator")}
    if "discriminator" in node and not partial:  # no default kind: the tag is required
        out["required"] = [tag]
    else:  # no tag: the default kind (listed first), or in an overlay any kind (the base may set it)
        default = {"anyOf": [{"$ref": r} for r in refs]} if partial else {"$ref": refs[0]}
        branches.append({"if": {"not": {"required": [tag]}}, "then": default})
    return {**out, "type": "object", "properties": {tag: {"enum": kinds}}, "allOf": branches}


def _interpolable(node: Any) -> Any:
    """`node` with each typed property (and typed list item) also accepting a `${...}` string."""
    if isinstance(node, list):
        return [_interpolable(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _interpolable(v) for k, v in node.items()}
    props = out.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: v if k in TAGS else _or_interpolation(v) for k, v in props.items()}
    return out


META = ("title", "description", "default")


def _or_interpolation(prop: Any) -> Any:
    if not isinstance(prop, dict) or not _is_value(prop) or _takes_any_text(prop):
        return prop
    if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
        prop = {**prop, "items": _or_interpolation(prop["items"])}
    meta = {k: prop[k] for k in META if k in prop}
    body = {k: v for k, v in prop.items() if k not in META}
    # if/else rather than anyOf: a wrong value is reported by its own schema ("2 is greater than
    # the maximum of 1.0"), not as "not valid under any of the given schemas"
    return {**meta, "if": {"$ref": "#/$defs/Interpolation"}, "else": body}


def _is_value(prop: dict) -> bool:
    """A scalar or a list of scalars, not a section (a model, a union of models)."""
    if "$ref" in prop or "properties" in prop or "allOf" in prop or prop.get("type") == "object":
        return False
    items = prop.get("items")
    return all(_is_value(o) for o in prop.get("anyOf", [])) and (
        not isinstance(items, dict) or _is_value(items)
    )


def _takes_any_text(prop: dict) -> bool:
    """Plain text (or one of several types that include plain text) already accepts `${...}`."""
    options = prop.get("anyOf", [prop])
    return any(
        o.get("type") == "string" and not ({"pattern", "enum", "const", "maxLength", "format"} & set(o))
        for o in options
    )


def _any_of(node: Any) -> Any:
    if isinstance(node, dict):
        return {("anyOf" if k == "oneOf" else k): _any_of(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_any_of(v) for v in node]
    return node


def _partial(node: Any) -> Any:
    """`node` with no `required`, its references pointing at the partial copies."""
    if isinstance(node, dict):
        out = {k: _partial(v) for k, v in node.items() if k != "required"}
        if isinstance(out.get("$ref"), str):
            out["$ref"] = out["$ref"].replace("#/$defs/", "#/$defs/Partial")
        if isinstance(out.get("discriminator"), dict):
            mapping = out["discriminator"].get("mapping", {})
            out["discriminator"]["mapping"] = {
                k: v.replace("#/$defs/", "#/$defs/Partial") for k, v in mapping.items()
            }
        return out
    if isinstance(node, list):
        return [_partial(v) for v in node]
    return node
