"""LLMCaller against a real HTTP server: answers, each fault kind, retries, masking, concurrency."""

from __future__ import annotations

import asyncio
import time

import dspy
import pytest

from pats.errors import JudgeError, PrerequisiteError
from pats.lm.caller import LLMCaller, build_lm, usd_cost
from pats.lm.faults import MalformedAnswer, mask_secrets
from pats.spec.models import LLMSpec
from pats.testing import ScriptedOpenAIServer

KEY_ENV = "PATS_TEST_LLM_KEY"
SECRET = "sk-test-SECRET123"


class Ask(dspy.Signature):
    """Answer the question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


def answer(text: str) -> str:
    """The ChatAdapter wire format of an answer to Ask."""
    return f"[[ ## answer ## ]]\n{text}\n\n[[ ## completed ## ]]"


def caller_for(server: ScriptedOpenAIServer, **overrides) -> LLMCaller:
    fields = dict(
        model="openai/scripted",
        api_base=server.base_url,
        api_key_env=KEY_ENV,
        timeout_s=0.5,
        max_retries=2,
        backoff_s=0.01,
        concurrency=2,
    )
    return LLMCaller(LLMSpec(**{**fields, **overrides}))


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)


async def ask(caller: LLMCaller, question: str = "What colour is the sky?") -> str:
    prediction = await caller.call(dspy.Predict(Ask), question=question)
    return prediction.answer


async def test_answer_and_request_shape():
    with ScriptedOpenAIServer([answer("blue")]) as server:
        caller = caller_for(server, temperature=0.3, max_tokens=77)
        assert await ask(caller) == "blue"
    body = server.requests[0]
    assert body["temperature"] == 0.3
    # The native OpenAI client sends max_completion_tokens, LiteLLM max_tokens.
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 77
    assert "What colour is the sky?" in server.prompts()[0]
    assert caller.faults == {} and caller.calls == 1


async def test_rate_limit_honours_retry_after():
    with ScriptedOpenAIServer([{"status": 429, "retry_after": 0.3}, answer("blue")]) as server:
        caller = caller_for(server, backoff_s=0.0)  # any wait seen below comes from Retry-After
        started = time.monotonic()
        assert await ask(caller) == "blue"
        waited = time.monotonic() - started
    assert caller.faults == {"rate_limit": 1}
    assert len(server.requests) == 2
    assert waited >= 0.3


async def test_server_error_then_success():
    with ScriptedOpenAIServer([{"status": 500}, {"status": 503}, answer("blue")]) as server:
        caller = caller_for(server)
        assert await ask(caller) == "blue"
    assert caller.faults == {"server_error": 2}


async def test_timeout_then_success():
    with ScriptedOpenAIServer([{"delay": 30.0, "text": answer("late")}, answer("blue")]) as server:
        caller = caller_for(server, timeout_s=0.3)
        # the first answer comes after 30 s: "blue" means the client gave up on it and retried
        assert await ask(caller) == "blue"
    assert caller.faults == {"timeout": 1}
    assert (caller.usage().timeouts, caller.usage().faults) == (1, 1)


async def test_malformed_body_and_truncated_body_are_retried():
    script = [{"malformed": True}, {"truncated": True, "text": answer("cut")}, answer("blue")]
    with ScriptedOpenAIServer(script) as server:
        caller = caller_for(server)
        assert await ask(caller) == "blue"
    assert caller.faults["malformed"] == 1
    assert caller.faults["connection"] == 1


async def test_unparseable_answer_counts_as_malformed():
    with ScriptedOpenAIServer(["no field markers at all", answer("blue")]) as server:
        caller = caller_for(server)
        assert await ask(caller) == "blue"
    assert caller.faults == {"malformed": 1}


async def test_every_answer_costs_its_tokens_an_unusable_one_too():
    # Two unusable answers (no field markers; fields but rejected by parse) and one usable answer: three
    # calls, and the tokens the server reported for all three (its usage counts words and punctuation).
    def parse(prediction):
        if prediction.answer != "blue":
            raise MalformedAnswer(f"expected a colour, got {prediction.answer!r}")
        return prediction.answer

    with ScriptedOpenAIServer(["no field markers", answer("forty-two"), answer("blue")]) as server:
        caller = caller_for(server)
        assert await caller.call(dspy.Predict(Ask), parse=parse, question="sky?") == "blue"
    usage = caller.usage()
    reported = sum(a.tokens for a in server.answered)
    assert len(server.answered) == 3 and all(a.tokens > 0 for a in server.answered)
    assert (usage.calls, usage.faults, usage.malformed, usage.tokens) == (3, 2, 2, reported)
    # ... split as the server reported it: prompt and completion apart, their sum the total
    completion = sum(a.completion_tokens for a in server.answered)
    assert 0 < completion < reported
    assert (usage.prompt_tokens, usage.completion_tokens) == (reported - completion, completion)
    assert caller.tokens == usage.prompt_tokens + usage.completion_tokens


def test_usd_by_litellms_offline_cost_map():
    import litellm  # its cost map is the copy it ships (LITELLM_LOCAL_MODEL_COST_MAP, set in conftest)

    prompt, completion = litellm.cost_per_token(
        model="openai/gpt-4o-mini", prompt_tokens=1000, completion_tokens=200
    )
    assert usd_cost("openai/gpt-4o-mini", 1000, 200) == prompt + completion > 0
    assert usd_cost("openai/gpt-4o-mini", 0, 0) == 0
    assert usd_cost("hosted_vllm/smollm2-135m-instruct", 1000, 200) is None, "a self-hosted model"
    assert usd_cost("openai/scripted", 1000, 200) is None


async def test_parse_rejection_is_retried():
    def parse(prediction):
        if prediction.answer != "blue":
            raise MalformedAnswer(f"expected a colour, got {prediction.answer!r}")
        return prediction.answer

    with ScriptedOpenAIServer([answer("forty-two"), answer("blue")]) as server:
        caller = caller_for(server)
        assert await caller.call(dspy.Predict(Ask), parse=parse, question="sky?") == "blue"
    assert caller.faults == {"malformed": 1}


async def test_retries_exhausted_raise_with_key_masked():
    script = [{"status": 500, "message": f"upstream rejected key {SECRET}"}] * 3
    with ScriptedOpenAIServer(script) as server:
        caller = caller_for(server, max_retries=2)
        with pytest.raises(JudgeError) as info:
            await ask(caller)
    assert len(server.requests) == 3  # one try and two retries, no hidden client retries
    assert caller.faults == {"server_error": 3}
    message = str(info.value)
    assert SECRET not in message and "***" in message
    assert "openai/scripted" in message and "server_error" in message


async def test_fatal_fault_is_not_retried():
    with ScriptedOpenAIServer([{"status": 401}, answer("blue")]) as server:
        caller = caller_for(server)
        with pytest.raises(JudgeError):
            await ask(caller)
    assert len(server.requests) == 1
    assert caller.faults == {"other": 1}


async def test_concurrency_limit():
    script = [{"delay": 0.2, "text": answer(f"a{i}")} for i in range(6)]
    with ScriptedOpenAIServer(script) as server:
        caller = caller_for(server, concurrency=2, timeout_s=2.0)
        answers = await asyncio.gather(*(ask(caller, f"q{i}") for i in range(6)))
    assert sorted(answers) == [f"a{i}" for i in range(6)]
    assert server.max_in_flight == 2  # parallel, but never more than the limit


async def test_global_dspy_settings_untouched():
    assert dspy.settings.lm is None
    with ScriptedOpenAIServer([answer("blue")]) as server:
        caller = caller_for(server)
        await ask(caller)
    assert dspy.settings.lm is None
    assert dspy.settings.adapter is None


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(PrerequisiteError, match=KEY_ENV):
        build_lm(LLMSpec(model="openai/x", api_key_env=KEY_ENV))


def test_build_lm_passes_settings():
    lm = build_lm(
        LLMSpec(model="openai/x", api_base="http://127.0.0.1:9/v1", api_key_env=KEY_ENV, timeout_s=7.0)
    )
    assert lm.kwargs["api_key"] == SECRET and lm.kwargs["timeout"] == 7.0
    assert lm.num_retries == 0 and lm.cache is False


def test_mask_secrets():
    text = f"key {SECRET} and sk-other-KEY999 and plain words"
    masked = mask_secrets(text, [KEY_ENV, None, "PATS_UNSET_VARIABLE"])
    assert masked == "key *** and *** and plain words"


async def test_cached_malformed_answer_is_not_served_to_its_retry(monkeypatch):
    from dspy.clients.cache import Cache

    # A memory-only cache for this test: nothing lands in ~/.dspy_cache, nothing comes from it.
    monkeypatch.setattr(
        dspy, "cache", Cache(enable_disk_cache=False, enable_memory_cache=True, disk_cache_dir=None)
    )
    with ScriptedOpenAIServer(["no field markers", answer("blue"), answer("green")]) as server:
        caller = caller_for(server, cache=True)
        assert await ask(caller) == "blue"  # the retry asked the server, not the cache
        assert await ask(caller) == "blue"  # the same question replays from the cache
    assert len(server.requests) == 2
    assert "rollout_id" not in server.requests[1]
    assert caller.faults == {"malformed": 2}  # the replay repeats the history, faults included


def test_scripted_server_plain_http():
    import json
    import urllib.error
    import urllib.request

    def post(url: str, body: dict):
        request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=2) as response:
            return json.loads(response.read())

    echo = lambda body: f"you said {body['messages'][-1]['content']}"  # noqa: E731
    with ScriptedOpenAIServer([echo], model="m1") as server:
        with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as response:
            assert json.loads(response.read())["data"][0]["id"] == "m1"
        url = f"{server.base_url}/chat/completions"
        reply = post(url, {"model": "m1", "messages": [{"role": "user", "content": "hi"}]})
        assert reply["choices"][0]["message"]["content"] == "you said hi"
        with pytest.raises(urllib.error.HTTPError) as info:  # the script ran out
            post(url, {"model": "m1", "messages": []})
        assert info.value.code == 500 and server.exhausted == 1
        server.add("more")
        assert post(url, {"messages": []})["choices"][0]["message"]["content"] == "more"
    assert len(server.requests) == 3
