"""The API key follows the provider unless the spec names one; another provider's key is named as a
mistake; `pats validate` notes an unset key and still passes (issue 25)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from pats.cli.main import main
from pats.errors import SpecError, SpecNotice
from pats.spec import load_spec
from pats.spec.models import LLMSpec

REPO = Path(__file__).resolve().parents[1]
OPENAI_SPEC = REPO / "experiments" / "ablations" / "llm_reviser_openai.yaml"


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("openai/gpt-4o-mini", "OPENAI_API_KEY"),
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),
        ("gemini/gemini-2.0-flash", "GEMINI_API_KEY"),
        ("together_ai/meta-llama/Llama-3-8b", "TOGETHERAI_API_KEY"),
        ("ollama/llama3", None),
        ("hosted_vllm/Qwen/Qwen2.5-7B-Instruct", None),
        ("bedrock/anthropic.claude-v2", None),  # no default known: as before, none
    ],
)
def test_the_key_variable_follows_the_provider(model, key):
    assert LLMSpec(model=model).api_key_env == key


def test_a_key_the_spec_names_or_nulls_is_kept():
    assert LLMSpec(model="openai/x", api_key_env="MY_PROXY_KEY").api_key_env == "MY_PROXY_KEY"
    assert LLMSpec(model="openai/x", api_key_env=None).api_key_env is None
    # Another provider's key at an api_base is allowed (the server there may take it) and kept as named.
    named = LLMSpec(model="openai/x", api_base="http://h/v1", api_key_env="TOGETHERAI_API_KEY")
    assert named.api_key_env == "TOGETHERAI_API_KEY"


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("ollama/llama3", None),
        ("hosted_vllm/Qwen/Qwen2.5-7B-Instruct", None),
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),
    ],
)
def test_swapping_the_model_by_override_swaps_the_key(model, key):
    spec = load_spec(
        OPENAI_SPEC, [f"reviser.llm.model={model}", "reviser.llm.api_base=http://127.0.0.1:8000/v1"]
    )
    assert (spec.reviser.llm.api_key_env, spec.judge.llm.api_key_env) == (key, "OPENAI_API_KEY")


@pytest.mark.parametrize(
    ("llm", "says"),
    [
        (
            "{model: anthropic/claude-3-5-haiku-latest, api_key_env: OPENAI_API_KEY}",
            "write api_key_env: ANTHROPIC_API_KEY",
        ),
        (
            "{model: ollama/llama3, api_key_env: OPENAI_API_KEY}",
            "ollama/ models take none: remove api_key_env",
        ),
        ("{model: hosted_vllm/q, api_base: 'http://h:8000/v1', api_key_env: ANTHROPIC_API_KEY}", "take none"),
    ],
)
def test_another_providers_key_is_named(write, llm, says):
    path = write("s.yaml", f"name: x\nenvironment: {{kind: twx}}\nreviser: {{kind: llm, llm: {llm}}}\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    (issue,) = caught.value.issues
    assert issue.path == "reviser.llm" and says in issue.message and "s.yaml:3" in issue.source


def notes_of(args: list[str]) -> tuple[int, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(["validate", *args])
    return code, [str(w.message) for w in caught if issubclass(w.category, SpecNotice)]


def test_validate_notes_an_unset_key_and_passes(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, notes = notes_of([str(OPENAI_SPEC)])
    assert code == 0 and len(notes) == 2, notes
    assert "reviser.llm: $OPENAI_API_KEY is not set" in notes[1] and notes[0].startswith(
        f"{OPENAI_SPEC}: judge.llm:"
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    assert notes_of([str(OPENAI_SPEC)]) == (0, [])
    monkeypatch.delenv("OPENAI_API_KEY")
    code, notes = notes_of([str(OPENAI_SPEC), "reviser.llm.model=ollama/llama3", "judge.kind=stats"])
    assert code == 0 and not [n for n in notes if "is not set" in n], "ollama/ needs no key"
