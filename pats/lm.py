"""LLM plumbing for the LLM judge and reviser: build a DSPy LM from an `LLMSpec` and call it safely.

`build_lm` makes a `dspy.LM` (LiteLLM model strings; DSPy picks its native client where it has one)
with DSPy's own retries off. `LLMCaller` owns retries instead, so that every fault is counted by kind
and the retry budget is ours: exponential backoff from `spec.backoff_s`, a 429's Retry-After honoured
(capped), a concurrency limit, a deadline per call, and a `JudgeError` with API keys masked once the
retries are spent. Programs run in worker threads under a scoped `dspy.context`; nothing here ever
calls `dspy.configure`, so two LMs (judge and reviser) never see each other's settings.

Structured answers: a call that passes `schema` (a JSON schema of its answer, see pats.reviser.llm and
pats.judges.llm) is sent with `response_format: {"type": "json_schema", ...}` and read by DSPy's
JSONAdapter when structured output is on for the endpoint (`llm.structured`: on, off, or auto, which
follows one probe request: `probe_structured`); otherwise with DSPy's ChatAdapter and
its `[[ ## field ## ]]` format, as before. A server that enforces the schema (vLLM, SGLang, llama.cpp,
OpenAI) then cannot answer outside it, enums of card ids included.

What is counted: every request an attempt sent is a call (`calls`), answered, malformed or failed, with
its seconds; tokens are those the server reported, malformed answers included (a request given up on
at the timeout reported none). `faults` counts the failed attempts by kind.

Departure from plain DSPy: ChatAdapter's silent fallback to JSONAdapter is off by default, so one
attempt is one request and an unparseable answer is counted as `malformed` and retried like any other
fault, never repaired by a second, uncounted request. With `llm.cache` on, each retry asks under its
own cache key, so a cached bad answer is never served to its own retry.

Fault kinds come from DSPy's LM error classes, onto which both of DSPy's engines (its native HTTP
client and LiteLLM) map their errors. The two differ on broken bodies: a 200 whose body is not JSON is
`malformed` on the native client but `server_error` through LiteLLM, and a body cut short is
`connection` resp. `server_error`. Auth, quota and invalid-request errors count as `other` and are not
retried (another attempt cannot fix them).

dspy and litellm import lazily: `import pats` must stay fast and must not touch the network. They are
the `llm` extra, not in the base install: `require_llm` says so with the install command.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib.util
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import combinations
from math import comb
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

from pats.errors import JudgeError, PrerequisiteError, SpecError, SpecIssue, install_hint
from pats.types import Assessment, EvidenceCard, LLMUsage, Record, ScaffoldEntry

if TYPE_CHECKING:
    import dspy

    from pats.spec.models import LLMSpec

M = TypeVar("M", bound=BaseModel)
PROMPTS_DIR = Path(__file__).resolve().parents[1] / "judges"  # rubrics and reviser prompt, as data
FAULT_KINDS = ("timeout", "rate_limit", "server_error", "connection", "malformed", "other")
MAX_WAIT_S = 60.0  # cap on one backoff or Retry-After wait
_KEY_PATTERN = re.compile(r"sk-[A-Za-z0-9_\-]{3,}")
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


class MalformedAnswer(ValueError):
    """An answer that arrived but cannot be used (wrong schema, unparseable). Counted and retried."""


LLM_INSTALL = install_hint("llm")


def require_llm() -> None:
    """A PrerequisiteError naming the `llm` extra when dspy or litellm is not installed."""
    missing = [name for name in ("dspy", "litellm") if importlib.util.find_spec(name) is None]
    if missing:
        raise PrerequisiteError(
            f"an LLM judge or reviser needs {' and '.join(missing)}, which the base install leaves out: "
            f"{LLM_INSTALL}, or use judge.kind: stats and reviser.kind: rules"
        )


def _prepare_litellm() -> None:
    require_llm()
    # Without this litellm downloads its model cost map on import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def mask_secrets(text: str, env_names: Iterable[str | None] = ()) -> str:
    """`text` with the values of the named environment variables and `sk-...` keys replaced by ***."""
    for name in env_names:
        value = os.environ.get(name) if name else None
        if value and len(value) >= 4:  # a 1-3 character "key" would mask ordinary words
            text = text.replace(value, "***")
    return _KEY_PATTERN.sub("***", text)


def api_key(spec: LLMSpec) -> str | None:
    """The key from the environment variable the spec names (None when it names none)."""
    if not spec.api_key_env:
        return None
    value = os.environ.get(spec.api_key_env)
    if not value:
        raise PrerequisiteError(
            f"environment variable {spec.api_key_env} is not set: {spec.model} needs an API key "
            "(llm.api_key_env names the variable; left out, it is the provider's). Export it; for a "
            "self-hosted OpenAI-compatible server that takes no key write hosted_vllm/<model>, or "
            "api_key_env: null"
        )
    return value


def build_lm(spec: LLMSpec) -> dspy.LM:
    """A `dspy.LM` for `spec`, with DSPy's retries off (LLMCaller retries and counts)."""
    _prepare_litellm()
    import dspy
    from dspy.utils.exceptions import LMConfigurationError

    clients: dict[str, Any] = {}
    if spec.api_base:
        clients["api_base"] = spec.api_base
    key = api_key(spec)
    if key is not None:
        clients["api_key"] = key
    try:
        return dspy.LM(
            spec.model,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
            timeout=spec.timeout_s,
            cache=spec.cache,
            num_retries=0,
            **clients,
        )
    except LMConfigurationError as exc:  # e.g. reasoning models refuse temperature 0
        raise SpecError(
            f"llm: {mask_secrets(str(exc), [spec.api_key_env])}; change llm.temperature / "
            "llm.max_tokens or pick another llm.model"
        ) from None


def prompt_file(path: str | None, default_name: str) -> Path:
    """`path` (relative to the working directory) if given, else `judges/<default_name>` of pats."""
    found = Path(path) if path else PROMPTS_DIR / default_name
    if not found.is_file():
        hint = (
            "fix the path in the spec"
            if path
            else "set the spec's rubric path, or reinstall pats from its source tree"
        )
        raise PrerequisiteError(f"prompt file {found} not found; {hint}")
    return found


def read_prompt_file(path: Path, model: type[M]) -> M:
    """A YAML prompt or rubric file validated into `model`; every problem reported at once."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid YAML: {exc}", file=str(path)) from None
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        issues = [SpecIssue(".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors()]
        raise SpecError(issues, file=str(path)) from None


# -- rendering records for prompts (shared by the LLM judge and reviser) ------------------------------


def render_cards(cards: Sequence[EvidenceCard], names: Sequence[str] | None = None) -> str:
    """The cards as a prompt shows them, each headed by its id, or by its name in `names` (the
    reviser's short aliases C1..Cn) when given."""
    if not cards:
        return "(no cards)"
    heads = list(names) if names is not None else [c.id for c in cards]
    blocks = []
    for head, card in zip(heads, cards, strict=True):
        tag = ", privileged: built from the expert plan" if card.privileged else ""
        blocks.append(f"[{head}] {card.type} card, task {card.task_id}{tag}\n{card.text.strip()}")
    return "\n\n".join(blocks)


def render_entries(entries: Sequence[ScaffoldEntry]) -> str:
    if not entries:
        return "(no entries)"
    return "\n".join(f"[{e.id}] {e.kind}, scope {e.scope}: {e.text.strip()}" for e in entries)


def render_assessment(assessment: Assessment) -> str:
    utility = "not measured" if assessment.utility is None else f"{assessment.utility:+.2f}"
    withdrawn = [f"{s.scope} ({s.success:.2f})" for s in assessment.scopes if s.withdraw]
    return (
        f"review mode {assessment.mode.value}; success moving average {assessment.ema_success:.2f}; "
        f"scaffold budget pressure {assessment.pressure:.2f}; utility (success with the scaffold minus "
        f"without) {utility}"
        + ("" if assessment.removal_open else "; warm-up: delete nothing unless over budget")
        + (
            f"; solved, so withdraw their entries and add none there: {', '.join(withdrawn)}"
            if withdrawn
            else ""
        )
    )


# -- faults --------------------------------------------------------------------------------------------


def fault_kind(exc: BaseException) -> str | None:
    """The fault kind of an exception raised while asking an LLM, or None if it is not an LLM fault.

    DSPy maps both of its engines' errors (native and LiteLLM) onto its own LM error classes; anything
    outside them (a TypeError in a program, say) is a bug and is not swallowed.
    """
    from dspy.utils import exceptions as dx

    if isinstance(exc, (MalformedAnswer, dx.AdapterParseError, dx.LMStreamAssemblyError)):
        return "malformed"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, dx.LMTimeoutError)):
        return "timeout"
    if isinstance(exc, dx.LMRateLimitError):
        return "rate_limit"
    if isinstance(exc, dx.LMTransportError):
        # The native engine reports a read timeout as a transport error.
        return "timeout" if "timed out" in str(exc).lower() else "connection"
    if isinstance(exc, dx.LMProviderError):
        status = getattr(exc, "status", None)
        if status == 200:  # a 200 whose body is not a completion
            return "malformed"
        if isinstance(exc, dx.LMServerError) or (isinstance(status, int) and status >= 500):
            return "server_error"
        return "other"
    if isinstance(exc, dx.LMError):
        return "other"
    return None


def retryable(exc: BaseException) -> bool:
    """False for faults that another attempt cannot fix: bad key, no quota, invalid request, bad config."""
    from dspy.utils import exceptions as dx

    fatal = (
        dx.LMAuthError,
        dx.LMBillingError,
        dx.LMInvalidRequestError,
        dx.LMConfigurationError,
        dx.LMUnsupportedFeatureError,
    )
    return not isinstance(exc, fatal)


def retry_after(exc: BaseException) -> float | None:
    """The server's Retry-After in seconds, where the error carries one."""
    value = getattr(exc, "retry_after", None)
    if value is None:
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        value = headers.get("retry-after") if hasattr(headers, "get") else None
    try:
        seconds = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and seconds >= 0 else None


def _tokens(usage: dict[str, dict[str, Any]] | None) -> tuple[int, int]:
    """(prompt, completion) tokens in DSPy's usage by LM (0 where the server or the response cache
    reported none)."""
    used = (usage or {}).values()
    return (
        sum(int(u.get("prompt_tokens") or 0) for u in used),
        sum(int(u.get("completion_tokens") or 0) for u in used),
    )


def usd_cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """What `prompt_tokens` and `completion_tokens` of `model` (a LiteLLM model string) cost in USD by
    LiteLLM's offline cost map, read without a download; None where the map does not know the model
    (any self-hosted one: `hosted_vllm/...`, or `openai/...` naming a server's own model)."""
    _prepare_litellm()
    import litellm
    from litellm.exceptions import ModelNotMappedError

    try:
        prompt, completion = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except ModelNotMappedError:
        return None
    return prompt + completion


# -- structured output probe -------------------------------------------------------------------------


def _endpoint(llm: LLMSpec) -> tuple[str, str | None, str | None]:
    return (llm.model, llm.api_base, llm.api_key_env)


def structured_decision(llm: LLMSpec) -> bool | None:
    """Structured output for `llm`'s endpoint as probed in this process (None: not probed)."""
    return _STRUCTURED.get(_endpoint(llm))


def _ask_probe(probe: Probe, max_tokens: int) -> Any:
    import dspy

    return dspy.settings.lm(
        probe.prompt, max_tokens=max_tokens, response_format=response_format(probe.name, probe.schema)
    )


def keeps_schema(text: str, schema: dict[str, Any]) -> bool:
    """Whether `text` is JSON that `schema` accepts."""
    import jsonschema

    try:
        return jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    except json.JSONDecodeError:
        return False


async def probe_structured(caller: LLMCaller, path: str = "") -> bool:
    """One request asking for an answer in the caller's own schema (`caller.probe`): True when the
    answer is JSON that schema accepts. The decision is kept for the endpoint and said on stderr; a
    fault or a refusal of the schema is off, and the caller then asks in DSPy's free-form fields. The
    request is one of the caller's calls (seconds, tokens), never retried, never a fault: a server that
    refuses the schema has answered the question."""
    llm, probe = caller.spec, caller.probe
    # As much room as a real call has: a model under the grammar may write a whole edit set instead of
    # the empty one asked for, and an answer cut short would read as a schema not kept.
    outputs, error = await caller.attempt(functools.partial(_ask_probe, probe, llm.max_tokens))
    if error is not None:
        detail = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
        why = f"the server refused the request with {probe.name}'s schema: {mask_secrets(detail, [llm.api_key_env])}"
        supported = False
    else:
        text = outputs[0] if outputs else ""
        text = text.get("text", "") if isinstance(text, dict) else str(text)
        supported = keeps_schema(text, probe.schema)
        why = (
            f"the probe's answer kept to {probe.name}'s JSON schema"
            if supported
            else f"the probe's answer did not keep to {probe.name}'s JSON schema: {text[:80]!r}"
        )
    _STRUCTURED[_endpoint(llm)] = supported
    where = f"{path}: " if path else ""
    where += llm.model + (f" at {llm.api_base}" if llm.api_base else "")
    state = "on" if supported else "off (free-form fields)"
    print(f"note: {where}: structured output {state}: {why}", file=sys.stderr, flush=True)
    return supported


class LLMCaller:
    """Runs DSPy programs against one LM with a concurrency limit, retries and fault counts.

    `calls` counts every attempt (each one request: answered, malformed or failed) and `seconds` their
    summed latency; `faults` counts the failed attempts by kind (FAULT_KINDS); `tokens` what the server
    reported, for the run's metrics. `structured` is whether calls with a schema send it (None: `auto`,
    not decided yet; the first such call decides, from the preflight's probe or one of its own).
    """

    def __init__(
        self,
        spec: LLMSpec,
        lm: Any = None,
        *,
        adapter: Any = None,
        deadline_s: float | None = None,
        max_wait_s: float = MAX_WAIT_S,
    ):
        require_llm()
        self.spec = spec
        self.lm = lm if lm is not None else build_lm(spec)
        self._built_lm = lm is None  # a caller-supplied LM keeps its own cache settings
        if adapter is None:
            _prepare_litellm()
            import dspy

            adapter = dspy.ChatAdapter(use_json_adapter_fallback=False)
        self.adapter = adapter
        # The HTTP timeout bounds each request; the deadline bounds the whole program run (a program
        # may make more than one request) in case a client ignores its timeout.
        self.deadline_s = deadline_s if deadline_s is not None else 2 * spec.timeout_s + 1.0
        self.max_wait_s = max_wait_s
        self.faults: Counter[str] = Counter()
        self.last_error: BaseException | None = None  # the fault behind the last JudgeError raised
        self.calls = 0
        self.seconds = 0.0
        # Prompt and completion tokens of every answer, as the server reported them: an answer that
        # could not be parsed cost its tokens too. `tokens` is their sum.
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self._tokens_lock = threading.Lock()  # answers are counted from the worker threads
        self.structured: bool | None = {"on": True, "off": False}.get(spec.structured)
        self.probe = PLAIN_PROBE  # the reviser and the judge set their own schema's (`Probe`)
        self._schema_adapter: Any = None
        self._deciding: asyncio.Lock | None = None
        self._deciding_loop: asyncio.AbstractEventLoop | None = None
        self._retry_lms: dict[int, Any] = {}
        self._semaphore: asyncio.Semaphore | None = None
        self._semaphore_loop: asyncio.AbstractEventLoop | None = None
        # Own threads: the loop's default executor has min(32, cpus + 4) workers and is shared.
        self._executor = ThreadPoolExecutor(spec.concurrency, thread_name_prefix="pats-llm")

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def usage(self) -> LLMUsage:
        return LLMUsage(
            calls=self.calls,
            seconds=self.seconds,
            tokens=self.tokens,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            faults=sum(self.faults.values()),
            malformed=self.faults["malformed"],
            timeouts=self.faults["timeout"],
        )

    async def call(
        self,
        program: dspy.Module,
        /,
        *,
        parse: Callable[[Any], Any] | None = None,
        schema: tuple[str, dict[str, Any]] | None = None,
        **inputs,
    ):
        """`program(**inputs)`, retried on LLM faults; `parse` turns the prediction into the result and
        raises MalformedAnswer for an answer in the wrong shape (counted and retried too). `schema`
        (name, JSON schema of the program's outputs) is sent as the response_format when structured
        output is on for this endpoint; the program is then read as JSON."""
        adapter = self.adapter
        if schema is not None and await self.uses_schema():
            adapter = self.schema_adapter()
            inputs = {**inputs, "config": {"response_format": response_format(*schema)}}
        semaphore = self._limit()
        loop = asyncio.get_running_loop()
        attempts = self.spec.max_retries + 1
        for attempt in range(attempts):
            async with semaphore:
                started, sent = time.monotonic(), [0]
                lm = self._lm_for(attempt)
                run = functools.partial(
                    contextvars.copy_context().run, self._run, lm, adapter, program, inputs, sent
                )
                try:
                    prediction = await asyncio.wait_for(
                        loop.run_in_executor(self._executor, run), self.deadline_s
                    )
                    result = parse(prediction) if parse is not None else prediction
                except Exception as exc:
                    fault = fault_kind(exc)
                    if fault is None:
                        raise  # a bug, not an LLM fault: keep its traceback
                    kind = fault
                    self.faults[kind] += 1
                    error = self.last_error = exc
                    self._count(started, sent)
                else:
                    self._count(started, sent)
                    return result
            if attempt + 1 == attempts or not retryable(error):
                break
            await asyncio.sleep(self._wait(attempt, error))  # outside the semaphore: others may go on
        raise JudgeError(self._describe(error, kind, attempt + 1)) from None

    async def attempt(self, program: Any, /, **inputs) -> tuple[Any, BaseException | None]:
        """`program(**inputs)` once: (its result, None), or (None, the LLM fault). Counted as a call with
        its seconds and tokens, not as a fault; for a probe, whose refusal is an answer."""
        started, sent = time.monotonic(), [0]
        run = functools.partial(
            contextvars.copy_context().run, self._run, self.lm, self.adapter, program, inputs, sent
        )
        try:
            async with self._limit():
                result = await asyncio.wait_for(
                    asyncio.get_running_loop().run_in_executor(self._executor, run), self.deadline_s
                )
        except Exception as exc:
            if fault_kind(exc) is None:
                raise
            return None, exc
        finally:
            self._count(started, sent)
        return result, None

    def _count(self, started: float, sent: list[int]) -> None:
        """One attempt sent, with its seconds, whether it was answered, malformed or failed: as many calls
        as requests its program run sent (`_run` puts them in `sent`; at least one)."""
        self.calls += max(1, sent[0])
        self.seconds += time.monotonic() - started

    async def uses_schema(self) -> bool:
        """Whether calls with a schema send it: llm.structured on or off, or for auto the preflight's
        probe of this endpoint, else one probe request of this caller's own (counted like any call).
        A caller given its LM (a test double) is never probed: auto is off there."""
        if self.structured is not None:
            return self.structured
        loop = asyncio.get_running_loop()
        if self._deciding is None or self._deciding_loop is not loop:
            self._deciding, self._deciding_loop = asyncio.Lock(), loop
        async with self._deciding:  # concurrent first calls wait for one probe
            if self.structured is None:
                known = structured_decision(self.spec)
                if known is None:
                    known = await probe_structured(self) if self._built_lm else False
                self.structured = known
        return self.structured

    def schema_adapter(self) -> Any:
        """The adapter for calls that send a schema: the answer is read as JSON."""
        if self._schema_adapter is None:
            self._schema_adapter = schema_adapter()
        return self._schema_adapter

    def _run(self, lm: Any, adapter: Any, program: Any, inputs: dict[str, Any], sent: list[int]) -> Any:
        import dspy
        from dspy.utils.usage_tracker import track_usage

        # Our own tracker (the program then adds to it instead of opening one) still holds the usage
        # when the adapter raises on an answer it cannot parse.
        # Requests: one per answer the tracker saw (a program such as the reviser's may ask more than
        # once), plus the one that raised without an answer (a malformed answer was seen already); an
        # answer from DSPy's response cache reports no usage, so a run counts at least one (`_count`).
        requests = 0
        with dspy.context(lm=lm, adapter=adapter, track_usage=True), track_usage() as tracker:
            try:
                return program(**inputs)
            except Exception as exc:
                requests = 0 if fault_kind(exc) == "malformed" else 1
                raise
            finally:
                prompt, completion = _tokens(tracker.get_total_tokens())
                requests += sum(len(entries) for entries in tracker.usage_data.values())
                sent[0] = requests
                with self._tokens_lock:
                    self.prompt_tokens += prompt
                    self.completion_tokens += completion

    def _lm_for(self, attempt: int) -> Any:
        """The LM for this attempt. With the response cache on, a retry must not get the cached copy
        of the answer it retries (DSPy caches a response before its adapter parses it), so each retry
        asks under its own cache key (`rollout_id`, never sent to the server). A rerun then replays
        the same sequence of answers, faults included."""
        if attempt == 0 or not (self._built_lm and self.spec.cache):
            return self.lm
        if attempt not in self._retry_lms:
            retry_lm = self.lm.copy(rollout_id=attempt)
            # DSPy warns that rollout_id does not change a temperature-0 generation; it does change the
            # cache key, which is all that is wanted here.
            retry_lm._warned_zero_temp_rollout = True
            self._retry_lms[attempt] = retry_lm
        return self._retry_lms[attempt]

    def _limit(self) -> asyncio.Semaphore:
        # A semaphore belongs to one event loop; a new loop (a new asyncio.run) gets a new one.
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore_loop is not loop:
            self._semaphore = asyncio.Semaphore(self.spec.concurrency)
            self._semaphore_loop = loop
        return self._semaphore

    def _wait(self, attempt: int, error: BaseException) -> float:
        hint = retry_after(error) if fault_kind(error) == "rate_limit" else None
        wait = hint if hint is not None else self.spec.backoff_s * 2**attempt
        return min(wait, self.max_wait_s)

    def _describe(self, error: BaseException, kind: str, attempts: int) -> str:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if isinstance(error, asyncio.TimeoutError | TimeoutError) and not str(error):
            detail = f"no answer within {self.deadline_s:g}s"
        elif (response := getattr(error, "lm_response", None)) is not None:  # an adapter parse failure
            fields = ", ".join(getattr(getattr(error, "signature", None), "output_fields", {}))
            detail = f"answer without the fields [{fields}]: {str(response)[:200]!r}"
        message = (
            f"{self.spec.model}: no usable answer after {attempts} attempt(s); last fault {kind}: "
            f"{detail[:300]} (faults so far: {dict(self.faults)}). Check the model, llm.api_base and the "
            "server, or raise llm.max_retries / llm.timeout_s"
        )
        return mask_secrets(message, [self.spec.api_key_env])

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
