"""Checks of the LLMs a spec names (judge.llm, reviser.llm), before anything expensive.

Without them a misconfigured LLM trains anyway: every review's call fails, the rules reviser answers
(faults counted) and the run "succeeds" without the LLM it was meant to study.

- `check_providers`: each model string's provider prefix against the installed LiteLLM's own provider
  list; an unknown one is a SpecError naming the field and the closest known providers
  (`hosted-vllm` -> `hosted_vllm`: `unknown_provider`, which `pats reviser bench --model` asks too).
  `pats validate` and `pats run` call it. It is not in the spec
  validator: `import litellm` takes seconds (~5 s here) and specs load on every command and in many
  tests, so LiteLLM is imported only here, and only for a spec that names an LLM. Without the `llm`
  extra (dspy, litellm) such a spec is a PrerequisiteError naming the field and the install command.
- `unset_keys`: each called LLM whose api_key_env is not set in the environment; `pats validate` prints
  them as notes and still exits 0.
- `preflight`: at `pats run` start, one short request to each LLM the run will call (its model string,
  api_base, key and timeout; llm.max_retries for transient faults; `pats reviser bench` gives the
  request a shorter timeout of its own than its bundles' calls, `_check`'s `ask_timeout_s`). A refused key, an unknown model,
  an unreachable server or no answer stops the run with a PrerequisiteError that says which field or
  environment variable to fix. `llm.preflight: false` skips it for that LLM.

  With `llm.structured: auto` a second request then probes structured output (`pats.lm.caller.probe_structured`)
  with the schema the run will send: the reviser's own edit schema (`pats.reviser.llm.reviser_probe`,
  under the spec's scaffold settings) where the endpoint serves the reviser, else the judge's verdict
  schema. Structured output is on for that endpoint when the answer is JSON that schema accepts (the
  server enforced it, or at least the model kept to it), off, with a note, when the server refused the
  schema or answered anything else: the run then asks in DSPy's free-form fields. The decision is
  kept for the process (`pats.lm.probe.structured_decision`), so the judge and reviser built next use it, and said on
  stderr. A caller whose endpoint was not probed (preflight off, or another process) probes on its
  first call with a schema.

The preflight request's only message is `PREFLIGHT_PROMPT`, the probe's starts `pats.lm.probe.PROBE_PREFIX`;
`pats.testing.ScriptedOpenAIServer` answers both without consuming its script.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
from typing import TYPE_CHECKING, Any

from pats.errors import JudgeError, PatsError, PrerequisiteError, SpecError, SpecIssue

if TYPE_CHECKING:
    from pats.lm.probe import Probe
    from pats.spec.models import ExperimentSpec, LLMSpec

PREFLIGHT_PROMPT = "pats preflight check: reply with the single word ok."
PREFLIGHT_MAX_TOKENS = 16  # enough for "ok"; a reasoning model may spend it all thinking, which still counts
PROVIDERS_URL = "https://docs.litellm.ai/docs/providers"


def spec_llms(spec: ExperimentSpec) -> list[tuple[str, LLMSpec]]:
    """(YAML path, LLMSpec) for every LLM the spec names."""
    out = []
    if spec.judge.kind == "llm":
        out.append(("judge.llm", spec.judge.llm))
    if spec.reviser.kind == "llm":
        out.append(("reviser.llm", spec.reviser.llm))
    return out


def called_llms(spec: ExperimentSpec) -> list[tuple[str, LLMSpec]]:
    """The LLMs a run of `spec` calls: the judge and reviser review only in modes grow and pats."""
    return spec_llms(spec) if spec.scaffold.reviews else []


# -- provider prefixes ----------------------------------------------------------------------------------


def litellm_providers() -> tuple[str, ...]:
    """The provider names of the installed LiteLLM (its `provider_list`), sorted."""
    from pats.lm.caller import _prepare_litellm

    _prepare_litellm()
    import litellm  # slow (seconds): only ever imported here, for a spec that names an LLM

    return tuple(sorted(str(getattr(p, "value", p)) for p in litellm.provider_list))


def unknown_provider(model: str, known: tuple[str, ...] | None = None) -> str | None:
    """What is wrong with `model`'s provider prefix when LiteLLM (`known`: its providers, read when
    None) does not know it, with the closest known ones (`hosted-vllm` -> did you mean 'hosted_vllm'?);
    None when it knows it. `pats validate`, `pats run` and `pats reviser bench` all ask this."""
    known = litellm_providers() if known is None else known
    prefix = model.split("/", 1)[0]
    if prefix in known:
        return None
    lowered = {name.lower(): name for name in known}
    close = [lowered[m] for m in difflib.get_close_matches(prefix.lower(), list(lowered), n=3)]
    hint = (
        "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
        if close
        else f"write one of LiteLLM's providers ({PROVIDERS_URL})"
    )
    return f"unknown LiteLLM provider '{prefix}'; {hint}"


def provider_issues(spec: ExperimentSpec) -> list[SpecIssue]:
    """One issue per LLM model string whose provider prefix LiteLLM does not know."""
    llms = spec_llms(spec)
    if not llms:
        return []
    known = litellm_providers()
    issues = []
    for path, llm in llms:
        problem = unknown_provider(llm.model, known)
        if problem:
            issues.append(SpecIssue(f"{path}.model", problem))
    return issues


def check_providers(spec: ExperimentSpec, file: str = "") -> None:
    try:
        issues = provider_issues(spec)
    except PrerequisiteError as err:  # the llm extra is not installed: say which spec and field need it
        where = (f"{file}: " if file else "") + " and ".join(path for path, _ in spec_llms(spec))
        raise PrerequisiteError(f"{where}: {err}") from None
    if issues:
        raise SpecError(issues, file=file)


def unset_keys(spec: ExperimentSpec) -> list[str]:
    """One line per LLM the run calls whose key variable is unset: `pats validate` warns (a key may be
    exported later, on the machine that runs it); `pats run`'s preflight stops on it."""
    import os

    return [
        f"{path}: ${llm.api_key_env} is not set, and {llm.model} needs it; export it before `pats run`"
        + (
            f" (or set {path}.api_key_env: null if the server at {llm.api_base} takes no key)"
            if llm.api_base
            else ""
        )
        for path, llm in called_llms(spec)
        if llm.api_key_env and not os.environ.get(llm.api_key_env)
    ]


# -- preflight ------------------------------------------------------------------------------------------


def preflight(spec: ExperimentSpec) -> None:
    """One short request to each LLM the run will call (those with llm.preflight on); every failure
    is reported at once in a PrerequisiteError. An LLM named twice (judge and reviser on the same
    model, endpoint and key) is asked once."""
    targets: dict[tuple, list[tuple[str, LLMSpec]]] = {}
    for path, llm in called_llms(spec):
        if llm.preflight:
            targets.setdefault((llm.model, llm.api_base, llm.api_key_env), []).append((path, llm))
    if not targets:
        return
    groups = list(targets.values())
    with _quiet_truncation():
        answers = asyncio.run(_check_all(groups, _probes(spec)))
    failed = [(group, problem) for group, problem in zip(groups, answers, strict=True) if problem]
    if failed:
        off = ", ".join(f"{path}.preflight: false" for group, _ in failed for path, _ in group)
        raise PrerequisiteError(
            "the check before training (one short request to each LLM the run calls) failed:\n"
            + "\n".join(f"  {problem}" for _, problem in failed)
            + f"\nFix that, or set {off} to train without the check (a failing LLM then costs its "
            "retries every step: the rules reviser answers in its place, a judge's grades stay unscored)"
        )


def _probes(spec: ExperimentSpec) -> dict[str, Probe]:
    """The structured-output probe of each LLM path: the schema that path's calls will send."""
    from pats.judges.llm import judge_probe
    from pats.reviser.compile import settings_of
    from pats.reviser.llm import reviser_probe

    return {"reviser.llm": reviser_probe(settings_of(spec)), "judge.llm": judge_probe()}


async def _check_all(groups: list[list[tuple[str, LLMSpec]]], probes: dict[str, Probe]) -> list[str | None]:
    """Each group's LLM asked once (a group: the paths that name one model, endpoint and key); its probe
    is the reviser's schema where the group serves the reviser (the larger schema), else the judge's."""
    checks = (
        _check(
            " and ".join(path for path, _ in group),
            group[0][1],
            probes["reviser.llm" if any(path == "reviser.llm" for path, _ in group) else "judge.llm"],
        )
        for group in groups
    )
    return list(await asyncio.gather(*checks))


def _ask() -> Any:
    import dspy

    return dspy.settings.lm(PREFLIGHT_PROMPT, max_tokens=PREFLIGHT_MAX_TOKENS)


async def _check(path: str, llm: LLMSpec, probe: Probe, ask_timeout_s: float | None = None) -> str | None:
    """None when `llm` answered, else what went wrong and what to write instead. `ask_timeout_s`: how
    long the short request waits for its answer (None: llm.timeout_s); the probe that follows has
    llm.timeout_s, as any call with the schema (a slow server's answer to it is not a refusal)."""
    from pats.lm.caller import LLMCaller, missing_key, probe_structured
    from pats.lm.probe import structured_decision

    head = f"{path} ({llm.model}{f' at {llm.api_base}' if llm.api_base else ''}): "
    key = missing_key(llm, f"{path}.api_key_env", f"{path}.api_key_env: null")
    if key:
        return head + key
    asked = llm.model_copy(update={"cache": False})  # a cached answer proves nothing
    if ask_timeout_s is not None:
        asked = asked.model_copy(update={"timeout_s": ask_timeout_s})
    try:
        caller = LLMCaller(asked)
    except PatsError as err:  # the settings refused
        return head + str(err).strip()
    try:
        await caller.call(_ask)
        if llm.structured == "auto" and structured_decision(llm) is None:
            if asked.timeout_s != llm.timeout_s:
                caller.close()
                caller = LLMCaller(llm.model_copy(update={"cache": False}))
            caller.probe = probe
            await probe_structured(caller, path)
    except JudgeError:
        return head + explain(path, asked, caller.last_error, sum(caller.faults.values()))
    finally:
        caller.close()
    return None


def explain(path: str, llm: LLMSpec, error: BaseException | None, attempts: int) -> str:
    """What a failed preflight request means, and which field or environment variable to change."""
    from dspy.utils import exceptions as dx

    from pats.lm.faults import fault_kind, mask_secrets
    from pats.spec.providers import KEYLESS, provider_of

    where = "the server" if llm.api_base else "the provider's API"  # the head names the address
    status = getattr(error, "status", None)
    code = f" ({status})" if status else ""
    text = str(error).strip() if error is not None else ""
    detail = mask_secrets(text.splitlines()[0][:240] if text else type(error).__name__, [llm.api_key_env])
    kind = fault_kind(error) if error is not None else None
    if isinstance(error, dx.LMNotConfiguredError):
        keyless = "; a self-hosted OpenAI-compatible server that takes no key is written hosted_vllm/<model>"
        if provider_of(llm.model) in KEYLESS:  # it is written so already
            keyless = ""
        return (
            f"{llm.model} needs an API key and none was given: set {path}.api_key_env to the name of the "
            f"environment variable that holds it, and export it{keyless}"
        )
    if isinstance(error, dx.LMAuthError) or status in (401, 403):
        if llm.api_key_env:
            fix = f"export the right key in ${llm.api_key_env} (named by {path}.api_key_env)"
        else:
            fix = f"set {path}.api_key_env to the name of the environment variable that holds its key"
        return f"{where} refused the key{code}: {fix}"
    if isinstance(error, dx.LMUnsupportedModelError) or status == 404:
        listing = ""
        if llm.api_base:
            listing = f" (an OpenAI-compatible server lists them at {llm.api_base.rstrip('/')}/models)"
        return (
            f"{where} knows no model or route for {llm.model}{code}: write a model it serves in "
            f"{path}.model{listing}, and check that {path}.api_base is the API root (usually ending "
            f"in /v1): {detail}"
        )
    if isinstance(error, dx.LMBillingError):
        return f"{where} refused the request for billing or quota{code}: {detail}"
    if kind == "connection":
        fix = f"start the server or fix {path}.api_base" if llm.api_base else "check the network"
        return f"cannot connect to {where} ({attempts} attempt(s)): {detail}: {fix}"
    if kind == "timeout":
        return (
            f"no answer from {where} within {path}.timeout_s={llm.timeout_s:g}s ({attempts} attempt(s)): "
            f"check the server, or raise {path}.timeout_s"
        )
    if kind in ("rate_limit", "server_error", "malformed"):
        what = {
            "rate_limit": "rate-limited",
            "server_error": "a server error",
            "malformed": "with something that is not a chat completion",
        }
        return (
            f"{where} answered {what[kind]}{code} on {attempts} attempt(s): {detail}; check the server "
            f"(an OpenAI-compatible endpoint?), or raise {path}.max_retries"
        )
    return f"{where} refused the request{code}: {detail}"


@contextlib.contextmanager
def _quiet_truncation():
    """Silences DSPy's 'response was truncated' warning while the preflight's short answers arrive."""
    logger, drop = logging.getLogger("dspy.clients.lm"), _DropTruncation()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


class _DropTruncation(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "truncated" not in record.getMessage()
