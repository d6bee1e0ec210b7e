"""A misconfigured LLM stops `pats run` before training instead of training silently without it (issue 17).

- `pats validate` refuses a model string whose provider prefix LiteLLM does not know (`hosted-vllm`).
- `pats run` asks each LLM one short request first (the scripted OpenAI-compatible server on
  127.0.0.1, which refuses wrong keys and unknown models as a real one does): a refused key, an unknown
  model, a closed port or no answer stops the run before any backend is built or step logged, saying
  which field or variable to fix; a right configuration trains; `preflight: false` trains as before,
  with the rules reviser in the LLM's place, and the run says so once after a few such steps.

Scripted backend and fake environment, no model: each run takes a few seconds.
"""

from __future__ import annotations

import socket

import pytest

from pats.cli.main import main
from pats.engine import run as run_module
from pats.llm_check import preflight
from pats.logging.events import FallbackEvent, StepEndEvent, read_events
from pats.spec.models import ExperimentSpec
from pats.testing import FakeEnv, ScriptedBackend, ScriptedOpenAIServer, improving_schedule

KEY_ENV = "PATS_TEST_KEY"
EMPTY_EDITS = "[[ ## edits ## ]]\n[]\n\n[[ ## completed ## ]]"  # a valid reviser answer: no edits

SPEC = """\
name: preflight
environment: {{kind: twx}}
scaffold: {{mode: pats}}
reviser:
  kind: llm
  llm: {{model: "{model}", api_base: "{base_url}", {key}timeout_s: {timeout}, max_retries: 0, preflight: {preflight}}}
trainer: {{steps: {steps}, tasks_per_step: 2, group_size: 4, checkpoint_every: 10}}
eval: {{every: 100, at_start: false, with_scaffold: false, num_tasks: 2}}
logging: {{root: "{root}", wandb: disabled, progress: false}}
"""


@pytest.fixture
def pats_run(tmp_path, monkeypatch, write, capsys):
    """`pats run` on FakeEnv tasks with a scripted backend; returns (exit code, stderr, backends built)."""
    built: list[ScriptedBackend] = []

    def make_backend(spec, make_env):
        built.append(ScriptedBackend(improving_schedule(), seed=3))
        return built[-1]

    monkeypatch.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=4))
    monkeypatch.setattr(run_module, "make_backend", make_backend)

    def run(base_url, *, model="openai/scripted", key=True, timeout=5.0, preflight=True, steps=1):
        text = SPEC.format(
            model=model,
            base_url=base_url,
            key=f"api_key_env: {KEY_ENV}, " if key else "",
            timeout=timeout,
            preflight=str(preflight).lower(),
            steps=steps,
            root=tmp_path,
        )
        capsys.readouterr()
        code = main(["run", str(write("preflight.yaml", text))])
        return code, capsys.readouterr().err, built

    return run


def closed_port() -> int:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assert_stopped_before_training(tmp_path, built, server=None):
    assert not built, "no backend (model load) may be built before the LLM answered"
    assert not (tmp_path / "preflight" / "events.jsonl").exists(), "no step may be logged"
    if server is not None:
        assert server.script == [EMPTY_EDITS], "the preflight must not consume a scripted answer"


# -- provider prefixes -----------------------------------------------------------------------------------


def test_validate_names_an_unknown_provider_and_the_closest_known_ones(write, capsys):
    spec = write(
        "typo.yaml",
        "name: typo\nenvironment: {kind: twx}\n"
        "judge: {kind: llm, llm: {model: opneai/gpt-4o-mini}}\n"
        "reviser: {kind: llm, llm: {model: hosted-vllm/Qwen/Qwen2.5-7B-Instruct, api_base: 'http://h:8000/v1'}}\n",
    )
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "reviser.llm.model: unknown LiteLLM provider 'hosted-vllm'; did you mean 'hosted_vllm'?" in err
    assert "judge.llm.model: unknown LiteLLM provider 'opneai'; did you mean 'openai'" in err, err
    assert "2 problems" in err, "both are reported at once"


def test_validate_accepts_known_providers(write, capsys):
    spec = write(
        "ok.yaml",
        "name: ok\nenvironment: {kind: twx}\n"
        "judge: {kind: llm, llm: {model: anthropic/claude-3-5-haiku-latest}}\n"
        "reviser: {kind: llm, llm: {model: hosted_vllm/Qwen/Qwen2.5-7B-Instruct}}\n",
    )
    assert main(["validate", str(spec)]) == 0, capsys.readouterr().err


def test_run_refuses_an_unknown_provider_before_anything(pats_run, tmp_path):
    code, err, built = pats_run("http://127.0.0.1:9/v1", model="hosted-vllm/scripted")
    assert code == 2
    assert "did you mean 'hosted_vllm'?" in err
    assert not built and not (tmp_path / "preflight").exists()


# -- preflight -------------------------------------------------------------------------------------------


def test_a_refused_key_stops_the_run_before_step_0(pats_run, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key")
    with ScriptedOpenAIServer([EMPTY_EDITS], api_key="sk-right-key") as server:
        code, err, built = pats_run(server.base_url)
        assert_stopped_before_training(tmp_path, built, server)
    assert code == 3
    assert "refused the key (401)" in err and f"${KEY_ENV}" in err and "reviser.llm.api_key_env" in err
    assert "reviser.llm.preflight: false" in err, "the message names the way out too"
    assert "sk-wrong-key" not in err


def test_an_unknown_model_stops_the_run(pats_run, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with ScriptedOpenAIServer([EMPTY_EDITS], models=["served-model"]) as server:
        code, err, built = pats_run(server.base_url, model="openai/other-model")
        assert_stopped_before_training(tmp_path, built, server)
        listing = f"{server.base_url}/models"
    assert code == 3
    assert "(404)" in err and "reviser.llm.model" in err and listing in err


def test_an_unreachable_endpoint_stops_the_run(pats_run, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    code, err, built = pats_run(f"http://127.0.0.1:{closed_port()}/v1")
    assert code == 3
    assert "cannot connect" in err and "reviser.llm.api_base" in err
    assert_stopped_before_training(tmp_path, built)


def test_a_server_that_does_not_answer_in_time_stops_the_run(pats_run, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with ScriptedOpenAIServer([EMPTY_EDITS], preflight={"delay": 3.0, "text": "ok"}) as server:
        code, err, built = pats_run(server.base_url, timeout=0.5)
        assert_stopped_before_training(tmp_path, built, server)
    assert code == 3
    assert "no answer" in err and "reviser.llm.timeout_s" in err


def test_openai_prefix_without_a_key_says_what_to_write(pats_run, tmp_path, monkeypatch):
    """The issue's second case: `openai/...` on a self-hosted server and no api_key_env (which is then
    OPENAI_API_KEY, the provider's, issue 25)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedOpenAIServer([EMPTY_EDITS]) as server:
        code, err, built = pats_run(server.base_url, key=False)
        assert_stopped_before_training(tmp_path, built, server)
    assert code == 3
    assert "reviser.llm (openai/scripted" in err and "OPENAI_API_KEY is not set" in err
    assert "needs an API key" in err and "llm.api_key_env" in err and "hosted_vllm/<model>" in err


def test_a_right_configuration_trains_and_the_preflight_eats_no_scripted_answer(
    pats_run, tmp_path, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, "sk-right-key")
    with ScriptedOpenAIServer([EMPTY_EDITS] * 20, api_key="sk-right-key", models=["scripted"]) as server:
        code, err, built = pats_run(server.base_url, steps=2)
        preflights, answered, left = len(server.preflights), len(server.requests), len(server.script)
    assert code == 0, err
    assert len(built) == 1 and preflights == 1
    assert answered >= 2 and left == 20 - answered, "every review request got a scripted answer"
    log = tmp_path / "preflight" / "events.jsonl"
    assert [e.step for e in read_events(log, StepEndEvent)] == [0, 1]
    assert not read_events(log, FallbackEvent), "the LLM reviser answered every review"


def test_preflight_false_trains_on_rules_and_says_so_once(pats_run, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key")
    steps = 4  # the warning comes at the third step in a row (FALLBACK_STREAK_WARNING), once
    with ScriptedOpenAIServer(api_key="sk-right-key") as server:
        code, err, built = pats_run(server.base_url, preflight=False, steps=steps)
        assert not server.preflights
    assert code == 0, err
    ends = read_events(tmp_path / "preflight" / "events.jsonl", StepEndEvent)
    assert [e.step for e in ends] == list(range(steps)), "today's behaviour: training goes on"
    assert all(e.metrics["review/fallback"] == 1.0 for e in ends)
    assert [e.metrics["review/fallback_streak"] for e in ends] == [float(s + 1) for s in range(steps)]
    assert err.count("steps in a row") == 1, err
    assert "step 2: the LLM reviser has failed 3 steps in a row" in err
    assert "reviser.llm" in err and "sk-wrong-key" not in err


def test_judge_and_reviser_on_one_endpoint_are_asked_once(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with ScriptedOpenAIServer() as server:
        llm = {"model": "openai/scripted", "api_base": server.base_url, "api_key_env": KEY_ENV}

        def spec(mode: str) -> ExperimentSpec:
            return ExperimentSpec.model_validate(
                {
                    "name": "both",
                    "environment": {"kind": "twx"},
                    "scaffold": {"mode": mode},
                    "judge": {"kind": "llm", "llm": llm},
                    "reviser": {"kind": "llm", "llm": llm},
                }
            )

        preflight(spec("pats"))
        assert len(server.preflights) == 1 and not server.requests
        preflight(spec("none"))
        assert len(server.preflights) == 1, "mode none reviews nothing, so no LLM is asked"


def test_an_unknown_provider_is_told_at_most_three_close_names_or_where_the_list_is():
    """pats.llm_check.unknown_provider read whole against a given provider list: the three closest of
    four close names, joined by "or"; case alone is not a known name; with none close, the list's
    address (issue 59, item 10; found by its mutation run)."""
    from pats.llm_check import PROVIDERS_URL, unknown_provider

    known = ("vllm", "hosted_vllm", "vllm_x", "vllm2", "vllmy", "openai")
    assert unknown_provider("vllm/m", known) is None
    assert unknown_provider("vlm/m", known) == (
        "unknown LiteLLM provider 'vlm'; did you mean 'vllm' or 'vllmy' or 'vllm2'?"
    )
    assert unknown_provider("OPENAI/m", known) == "unknown LiteLLM provider 'OPENAI'; did you mean 'openai'?"
    assert unknown_provider("zzz/m", known) == (
        f"unknown LiteLLM provider 'zzz'; write one of LiteLLM's providers ({PROVIDERS_URL})"
    )
    assert PROVIDERS_URL == "https://docs.litellm.ai/docs/providers"


def test_an_unset_key_is_told_before_any_request_as_the_spec_writes_it(monkeypatch):
    """_check asks pats.lm.caller.missing_key first (issue 59, item 11): nothing is sent, and the field
    and the "no key" are said as a spec writes them, under the LLM's path."""
    import asyncio

    from pats.llm_check import _check
    from pats.spec.models import LLMSpec

    monkeypatch.delenv(KEY_ENV, raising=False)
    with ScriptedOpenAIServer() as server:
        llm = LLMSpec(model="openai/m", api_base=server.base_url, api_key_env=KEY_ENV)
        said = asyncio.run(_check("judge.llm", llm, probe=None))  # type: ignore[arg-type]
        assert not server.preflights and not server.requests
        url = server.base_url
    assert said == (
        f"judge.llm (openai/m at {url}): environment variable {KEY_ENV} is not set: openai/m "
        "needs an API key (judge.llm.api_key_env names the variable; left out, it is the provider's). "
        "Export it; for a self-hosted OpenAI-compatible server that takes no key write hosted_vllm/<model>, "
        "or judge.llm.api_key_env: null"
    )
    hosted = LLMSpec(model="openai/m", api_key_env=KEY_ENV)
    assert asyncio.run(_check("judge.llm", hosted, probe=None)) == (  # type: ignore[arg-type]
        f"judge.llm (openai/m): environment variable {KEY_ENV} is not set: openai/m needs an API key "
        "(judge.llm.api_key_env names the variable; left out, it is the provider's). Export it"
    )


def test_each_check_asks_the_server_even_where_the_llm_caches_its_answers(monkeypatch):
    """A cached answer proves nothing of the server: with llm.cache on, a second check asks again."""
    import asyncio

    from pats.llm_check import _check
    from pats.spec.models import LLMSpec

    monkeypatch.setenv(KEY_ENV, "sk-test")
    with ScriptedOpenAIServer() as server:
        llm = LLMSpec(model="openai/scripted", api_base=server.base_url, api_key_env=KEY_ENV, cache=True,
                      structured="off")  # fmt: skip
        assert [asyncio.run(_check("judge.llm", llm, probe=None)) for _ in range(2)] == [None, None]  # type: ignore[arg-type]
        assert len(server.preflights) == 2


def test_a_key_none_gave_does_not_tell_a_keyless_model_to_be_written_keyless():
    """explain for LiteLLM's 'not configured' (no key given), read whole: a hosted provider is told the
    keyless model string, a model already written hosted_vllm/ is not (issue 59, item 11)."""
    from dspy.utils import exceptions as dx

    from pats.llm_check import explain
    from pats.spec.models import LLMSpec

    error = dx.LMNotConfiguredError("no key")
    head = (
        "{} needs an API key and none was given: set reviser.llm.api_key_env to the name of the "
        "environment variable that holds it, and export it"
    )
    assert explain("reviser.llm", LLMSpec(model="openai/m"), error, 1) == head.format("openai/m") + (
        "; a self-hosted OpenAI-compatible server that takes no key is written hosted_vllm/<model>"
    )
    keyless = LLMSpec(model="hosted_vllm/m", api_base="http://127.0.0.1:9/v1")
    assert explain("reviser.llm", keyless, error, 1) == head.format("hosted_vllm/m")


def test_settings_the_llm_library_refuses_are_told_under_the_llms_path(monkeypatch):
    """A reasoning model at temperature 0 (dspy refuses it when the LM is built): the check says so,
    headed with the path and model, before any request."""
    import asyncio

    from pats.llm_check import _check
    from pats.spec.models import LLMSpec

    monkeypatch.setenv(KEY_ENV, "sk-test")
    url = "http://127.0.0.1:9/v1"
    said = asyncio.run(
        _check("reviser.llm", LLMSpec(model="openai/o1", api_key_env=KEY_ENV, api_base=url), None)
    )  # type: ignore[arg-type]
    assert said is not None
    head, problem = said.split("\n", 1)
    assert head == f"reviser.llm (openai/o1 at {url}): 1 problem in the spec"
    assert problem.startswith("  <top level>: llm: [openai/o1] OpenAI's reasoning models require")
    assert problem.endswith("; change llm.temperature / llm.max_tokens or pick another llm.model")


def test_the_schema_probe_follows_the_short_request_and_waits_the_llms_own_timeout(monkeypatch):
    """structured: auto and no decision yet: after the short request (waiting its own ask timeout), the
    probe with the schema goes out with llm.timeout_s and uncached (llm.cache on here), each check asking
    afresh; a server slower to answer the probe than the short request's timeout keeps structured output
    on. Decided or not auto: no probe."""
    import asyncio

    from pats.llm_check import _check
    from pats.lm import probe as probe_module
    from pats.reviser.llm import reviser_probe
    from pats.reviser.prompt import ReviserSettings
    from pats.spec.models import LLMSpec
    from pats.testing.openai_server import _asked_object

    monkeypatch.setattr(probe_module, "_STRUCTURED", {})
    schema = reviser_probe(ReviserSettings(min_citations=2))
    with ScriptedOpenAIServer(
        structured=True, probe=lambda body: {"delay": 1.0, "text": _asked_object(body)}
    ) as server:
        llm = LLMSpec(
            model="hosted_vllm/probed", api_base=server.base_url, timeout_s=30.0, max_retries=0, cache=True
        )
        assert asyncio.run(_check("reviser.llm", llm, schema, ask_timeout_s=0.5)) is None
        assert len(server.preflights) == 1 and len(server.probes) == 1
        assert probe_module.structured_decision(llm) is True, "the probe waited longer than 0.5 s"
        assert asyncio.run(_check("reviser.llm", llm, schema, ask_timeout_s=0.5)) is None
        assert len(server.probes) == 1, "decided: no second probe"
        probe_module._STRUCTURED.clear()
        assert asyncio.run(_check("reviser.llm", llm, schema, ask_timeout_s=0.5)) is None
        assert len(server.probes) == 2, "a probe's answer is never read from a cache"
        for structured in ("on", "off"):
            probe_module._STRUCTURED.clear()
            fixed = llm.model_copy(update={"structured": structured})
            assert asyncio.run(_check("reviser.llm", fixed, schema, ask_timeout_s=0.5)) is None
        assert len(server.probes) == 2 and len(server.preflights) == 5
