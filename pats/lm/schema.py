"""The JSON schemas of structured answers, and the adapter that sends them.

A call that passes `schema` (a JSON schema of its answer, see pats.reviser.llm and pats.judges.llm) is
sent with `response_format: {"type": "json_schema", ...}` and read by DSPy's JSONAdapter when
structured output is on for the endpoint (`llm.structured`: on, off, or auto, which follows one probe
request: pats.lm.probe); otherwise with DSPy's ChatAdapter and its `[[ ## field ## ]]` format. A server
that enforces the schema (vLLM, SGLang, llama.cpp, OpenAI) then cannot answer outside it, enums of
card ids included.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import combinations
from math import comb
from typing import Any

from pats.types import Record


def response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI `response_format` asking for an answer in `schema` (strict: no other keys)."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def schema_adapter() -> Any:
    """DSPy's JSONAdapter sending the call's own `response_format` (config of the call): DSPy's would
    derive one from the signature, without this call's enums, or send none where LiteLLM does not list
    the endpoint as one that takes schemas (a self-hosted server under openai/ or hosted_vllm/)."""
    import dspy

    class SchemaAdapter(dspy.JSONAdapter):
        def _prepare_response_format(self, lm, lm_kwargs, signature):
            return None  # keep the response_format the call carries

    return SchemaAdapter()


def record_schema(record: type[Record], narrowed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of a typed record as a strict answer object: every field required, no other
    keys, and the fields in `narrowed` replaced by those schemas (the enums of what a call shows)."""
    properties = {}
    for name, prop in record.model_json_schema()["properties"].items():
        prop = narrowed.get(name, prop)
        properties[name] = {k: v for k, v in prop.items() if k not in ("title", "default")}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def enum(values: Sequence[str]) -> dict[str, Any]:
    return {"type": "string", "enum": list(dict.fromkeys(values))}


CITES_MAX = 4  # citations one answer item may carry under a schema (see cites_schema)
# Branches of the anyOf that makes the first `min_citations` citations distinct (see cites_schema): past
# this many, only the first two are forced apart and the validator counts the rest.
DISTINCT_BRANCHES_MAX = 64


def cites_schema(card_ids: Sequence[str], min_citations: int) -> dict[str, Any]:
    """Citations: ids of the cards shown only, at least `min_citations` of them, and the first
    `min_citations` distinct.

    Distinctness without `uniqueItems` (which xgrammar compiles but ignores, and which other vLLM grammar
    backends refuse): the first citations must come in the order the cards are listed, strictly
    increasing, so one `anyOf` branch per choice of all but the last, each `prefixItems: [{const: id_i},
    ..., {enum: ids after the last const}]`. With two citations that is one branch per card but the last
    ([a,a] and [b,a] are refused, [a,b] and [a,b,a] accepted). More than DISTINCT_BRANCHES_MAX branches:
    only the first two citations are forced apart, and the validator's rule says the rest."""
    ids = list(dict.fromkeys(card_ids))
    if not ids:
        return {"type": "array", "maxItems": 0}
    # At most CITES_MAX citations (or min_citations, if more), and no more than the cards shown: a small
    # model otherwise repeats one id until max_tokens cuts the answer (seen: one ALFWorld id, ~40 tokens,
    # twelve times in one edit).
    most = min(len(ids), max(CITES_MAX, min_citations))
    schema: dict[str, Any] = {"type": "array", "items": enum(ids), "maxItems": most}
    if min_citations > 0:
        schema["minItems"] = min_citations
    if min_citations < 2 or len(ids) < min_citations:
        return schema
    distinct = min_citations
    while distinct > 2 and comb(len(ids) - 1, distinct - 1) > DISTINCT_BRANCHES_MAX:
        distinct -= 1
    branches = []
    for firsts in combinations(range(len(ids) - 1), distinct - 1):
        prefix: list[dict[str, Any]] = [{"const": ids[i]} for i in firsts]
        prefix.append(enum(ids[firsts[-1] + 1 :]))
        branches.append({**schema, "prefixItems": prefix})
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def keeps_schema(text: str, schema: dict[str, Any]) -> bool:
    """Whether `text` is JSON that `schema` accepts."""
    import jsonschema

    try:
        return jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    except json.JSONDecodeError:
        return False
