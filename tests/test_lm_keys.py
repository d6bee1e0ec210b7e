"""What an unset key's variable is told (pats.lm.caller.missing_key, issue 59 item 11), read whole for each
case: a model already written for a keyless server is not told to be written so, a hosted provider
without a base is not offered hosted_vllm/, and the field and the "no key" are said as the caller writes
them (a spec's path, or `pats reviser bench`'s flag, where no null can be written)."""

from __future__ import annotations

import pytest

from pats.errors import PrerequisiteError
from pats.lm.caller import api_key, missing_key
from pats.spec.models import LLMSpec

ENV = "PATS_TEST_UNSET_KEY_VAR"
URL = "http://127.0.0.1:9/v1"


@pytest.fixture
def unset(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def test_a_set_variable_or_none_named_is_no_problem_and_api_key_reads_it(monkeypatch):
    monkeypatch.setenv(ENV, "sk-x")
    spec = LLMSpec(model="openai/m", api_key_env=ENV)
    assert missing_key(spec) is None and api_key(spec) == "sk-x"
    keyless = LLMSpec(model="hosted_vllm/m", api_base=URL)
    assert keyless.api_key_env is None
    assert missing_key(keyless) is None and api_key(keyless) is None


def test_an_empty_variable_is_unset(monkeypatch):
    monkeypatch.setenv(ENV, "")
    assert missing_key(LLMSpec(model="openai/m", api_key_env=ENV)) is not None


def test_a_hosted_provider_without_a_base_is_told_to_export_it(unset):
    spec = LLMSpec(model="openai/m", api_key_env=ENV)
    said = (
        f"environment variable {ENV} is not set: openai/m needs an API key (llm.api_key_env names the "
        "variable; left out, it is the provider's). Export it"
    )
    assert missing_key(spec) == said
    with pytest.raises(PrerequisiteError) as info:
        api_key(spec)
    assert str(info.value) == said


def test_a_base_adds_the_keyless_model_string_and_the_null_as_the_caller_writes_them(unset):
    spec = LLMSpec(model="openai/m", api_base=URL, api_key_env=ENV)
    head = (
        f"environment variable {ENV} is not set: openai/m needs an API key ({{}} names the variable; left "
        "out, it is the provider's). Export it; for a self-hosted OpenAI-compatible server that takes no "
        "key write hosted_vllm/<model>"
    )
    assert missing_key(spec) == head.format("llm.api_key_env") + ", or api_key_env: null"
    field = "reviser.llm.api_key_env"
    assert missing_key(spec, field, f"{field}: null") == head.format(field) + f", or {field}: null"
    assert missing_key(spec, "--api-key-env", null=None) == head.format("--api-key-env")


def test_a_keyless_model_naming_a_variable_is_told_to_export_it_or_leave_the_field_out(unset):
    spec = LLMSpec(model="hosted_vllm/m", api_base=URL, api_key_env=ENV)
    assert missing_key(spec, "--api-key-env", null=None) == (
        f"environment variable {ENV} is not set, and --api-key-env names it as the key of hosted_vllm/m: "
        "export it, or leave --api-key-env out if the server takes no key"
    )
    assert missing_key(spec) == (
        f"environment variable {ENV} is not set, and llm.api_key_env names it as the key of hosted_vllm/m: "
        "export it, or leave llm.api_key_env out if the server takes no key"
    )
