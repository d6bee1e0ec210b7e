"""JSON Schema of `ExperimentSpec`, for editors (yaml-language-server) and the drift test."""

from __future__ import annotations

import json

from pats.spec.models import ExperimentSpec

SCHEMA_PATH = "schemas/experiment.schema.json"


def schema_text() -> str:
    schema = ExperimentSpec.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pats experiment spec"
    # `defaults:` is consumed by the loader before validation, so the models do not know it.
    schema["properties"] = {
        "defaults": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Base spec files this one extends, relative to this file; later wins.",
        },
        **schema["properties"],
    }
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"
