"""Build a DSPy LM from an `LLMSpec` and call it safely: retries, faults and token accounting.

`build_lm` makes a `dspy.LM` (LiteLLM model strings; DSPy picks its native client where it has one)
with DSPy's own retries off. `LLMCaller` owns retries instead, so that every fault is counted by kind
(pats.lm.faults) and the retry budget is ours: exponential backoff from `spec.backoff_s`, a 429's
Retry-After honoured (capped), a concurrency limit, a deadline per call, and a `JudgeError` with API
keys masked once the retries are spent. Programs run in worker threads under a scoped
`dspy.context`; nothing here ever calls `dspy.configure`, so two LMs (judge and reviser) never see
each other's settings. A call given a `schema` (pats.lm.schema) sends it when structured output is on
for the endpoint.

Structured output (`llm.structured`: on, off, or auto): with auto, the first call with a schema (or
the preflight, pats.llm_check) sends one probe request (`probe_structured`) asking for an answer in the
caller's own schema (`pats.lm.probe.Probe`); structured output is on for that endpoint when the answer
is JSON the schema accepts, off when the server refused the schema or answered anything else. The
decision is kept for the process (`pats.lm.probe.structured_decision`) and said on stderr.

What is counted: every request an attempt sent is a call (`calls`), answered, malformed or failed, with
its seconds; tokens are those the server reported, malformed answers included (a request given up on
at the timeout reported none). `faults` counts the failed attempts by kind.

Departure from plain DSPy: ChatAdapter's silent fallback to JSONAdapter is off by default, so one
attempt is one request and an unparseable answer is counted as `malformed` and retried like any other
fault, never repaired by a second, uncounted request. With `llm.cache` on, each retry asks under its
own cache key, so a cached bad answer is never served to its own retry.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib.util
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pats.errors import JudgeError, PrerequisiteError, SpecError, install_hint
from pats.lm.faults import fault_kind, mask_secrets, retry_after, retryable
from pats.lm.probe import PLAIN_PROBE, Probe, remember_structured, structured_decision
from pats.lm.schema import keeps_schema, response_format, schema_adapter
from pats.types import LLMUsage

if TYPE_CHECKING:
    import dspy

    from pats.spec.models import LLMSpec

MAX_WAIT_S = 60.0  # cap on one backoff or Retry-After wait

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


def missing_key(
    spec: LLMSpec, field: str = "llm.api_key_env", null: str | None = "api_key_env: null"
) -> str | None:
    """What to do when the variable `spec.api_key_env` names is unset (None when it is set, or no key is
    named). `field` is how the setting is written where the user sets it (a spec's path, or a flag such
    as `pats reviser bench --api-key-env`), `null` how to say "no key" there (None: it cannot be said).
    A model already written for a keyless server (hosted_vllm/, ollama/) is not told to be written so."""
    from pats.spec.providers import KEYLESS, provider_of

    env = spec.api_key_env
    if not env or os.environ.get(env):
        return None
    if provider_of(spec.model) in KEYLESS:
        return (
            f"environment variable {env} is not set, and {field} names it as the key of {spec.model}: "
            f"export it, or leave {field} out if the server takes no key"
        )
    message = (
        f"environment variable {env} is not set: {spec.model} needs an API key ({field} names the "
        "variable; left out, it is the provider's). Export it"
    )
    if spec.api_base:
        message += "; for a self-hosted OpenAI-compatible server that takes no key write hosted_vllm/<model>"
        message += f", or {null}" if null else ""
    return message


def api_key(spec: LLMSpec) -> str | None:
    """The key from the environment variable the spec names (None when it names none)."""
    problem = missing_key(spec)
    if problem:
        raise PrerequisiteError(problem)
    return os.environ.get(spec.api_key_env) if spec.api_key_env else None


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


def _ask_probe(probe: Probe, max_tokens: int) -> Any:
    import dspy

    return dspy.settings.lm(
        probe.prompt, max_tokens=max_tokens, response_format=response_format(probe.name, probe.schema)
    )


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
    remember_structured(llm, supported)
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
