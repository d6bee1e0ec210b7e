"""What the structured-output probe asks, and what it found per endpoint.

With `llm.structured: auto` the first call with a schema (or the preflight, pats.llm_check) sends one
probe request (`pats.lm.caller.probe_structured`) asking for an answer in the caller's own schema, a
`Probe`. Structured output is then on for that endpoint when the answer is JSON the schema accepts,
off when the server refused the schema or answered anything else; the decision is kept for the
process (`structured_decision`), so the judge and reviser built next use it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pats.spec.models import LLMSpec

PROBE_PREFIX = "pats structured-output probe:"  # how a test server tells the probe from other requests


class Probe(NamedTuple):
    """What the structured-output probe sends: a caller's own answer schema (the reviser's edit schema:
    a 4-variant anyOf with const/prefixItems citations, maxLength, strict; the judge's verdicts) and an
    answer it allows, which the prompt asks for. A server that refuses the schema refuses it here, once,
    instead of on every review call."""

    name: str
    schema: dict[str, Any]
    answer: dict[str, Any]

    @property
    def prompt(self) -> str:
        return f"{PROBE_PREFIX} answer with the JSON object {json.dumps(self.answer)}."


# The probe of a caller that has none of its own (a plain LLMCaller): the smallest schema.
PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["ok"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
PLAIN_PROBE = Probe("pats_probe", PROBE_SCHEMA, {"answer": "ok"})


# (model, api_base, api_key_env) -> structured output on, as the probe found it in this process.
_STRUCTURED: dict[tuple[str, str | None, str | None], bool] = {}


def _endpoint(llm: LLMSpec) -> tuple[str, str | None, str | None]:
    return (llm.model, llm.api_base, llm.api_key_env)


def structured_decision(llm: LLMSpec) -> bool | None:
    """Structured output for `llm`'s endpoint as probed in this process (None: not probed)."""
    return _STRUCTURED.get(_endpoint(llm))


def remember_structured(llm: LLMSpec, on: bool) -> None:
    """Keep the probe's decision for `llm`'s endpoint for the rest of the process."""
    _STRUCTURED[_endpoint(llm)] = on
