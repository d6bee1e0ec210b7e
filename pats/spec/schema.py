"""JSON Schema of `ExperimentSpec`, for editors (yaml-language-server) and the drift test.

A spec with `defaults:` is an overlay on its bases, so nothing in it is required: it is checked
against `PartialExperimentSpec`, a copy of the models' schema without `required`. Sections whose
kind has a default (judge, reviser, trainer) are `anyOf`, not `oneOf`: `trainer: {steps: 5}` fits
either trainer kind, and the loader, not the editor, decides which (the default).
"""

from __future__ import annotations

import json
from typing import Any

from pats.spec.models import ExperimentSpec

SCHEMA_PATH = "schemas/experiment.schema.json"
DEFAULTS = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Base spec files this one extends, relative to this file; later wins.",
}


def schema_text() -> str:
    root = _any_of(ExperimentSpec.model_json_schema(mode="validation"))
    defs = root.pop("$defs")
    # `defaults:` is consumed by the loader before validation, so the models do not know it.
    root["properties"] = {"defaults": DEFAULTS, **root["properties"]}
    title = root.pop("title")
    partial = {f"Partial{name}": _partial(body) for name, body in {title: root, **defs}.items()}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pats experiment spec",
        "description": "A full spec, or with `defaults:` an overlay on base specs (nothing required).",
        "if": {"required": ["defaults"]},
        "then": {"$ref": f"#/$defs/Partial{title}"},
        "else": {"$ref": f"#/$defs/{title}"},
        "$defs": {title: root, **defs, **partial},
    }
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


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
