"""A spec is untrusted data, and API keys never leak from it.

A spec names the environment variable that holds a key (`llm.api_key_env`), never the key: the
resolved spec (`pats show`, the run's spec.yaml, the W&B config) holds no key, a spec that copies one
in through `${oc.env:...}` is refused without quoting it, a missing variable is named, error messages
have keys masked, and YAML cannot run code. No model is loaded and no run is started.
"""

from __future__ import annotations

import json

import pytest

from pats.engine.run import new_run
from pats.errors import JudgeError, PrerequisiteError, SpecError
from pats.lm.caller import LLMCaller, build_lm
from pats.lm.faults import mask_secrets
from pats.spec import load_spec, spec_to_yaml
from pats.spec.models import LLMSpec
from pats.testing import ScriptedOpenAIServer

KEY_ENV = "PATS_FAKE_KEY"
PLANTED = "sk-test-PLANTED-123"
SPEC = f"""\
name: secrets
environment: {{kind: twx}}
judge: {{kind: llm, llm: {{model: openai/gpt-4o-mini, api_key_env: {KEY_ENV}}}}}
reviser: {{kind: llm, llm: {{model: openai/gpt-4o-mini, api_key_env: {KEY_ENV}}}}}
"""


@pytest.fixture(autouse=True)
def planted_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, PLANTED)


def no_key(text: str) -> None:
    assert PLANTED not in text and "PLANTED" not in text, text


# -- (a) the resolved spec holds the variable's name, never the key -----------------------------


def test_resolved_spec_names_the_variable_not_the_key(write):
    spec = load_spec(write("s.yaml", SPEC))
    assert spec.judge.llm.api_key_env == KEY_ENV
    shown = spec_to_yaml(spec)
    no_key(shown)
    assert f"api_key_env: {KEY_ENV}" in shown
    no_key(spec.model_dump_json())
    no_key(json.dumps(spec.model_dump(mode="json")))  # the W&B run config


def test_run_directory_spec_has_no_key(write, tmp_path):
    root = tmp_path / "runs"
    spec = load_spec(write("s.yaml", SPEC), [f"logging.root={root}"])
    run_dir = new_run(spec)
    assert run_dir == root / "secrets"
    written = (run_dir / "spec.yaml").read_text(encoding="utf-8")
    no_key(written)
    assert KEY_ENV in written
    assert load_spec(run_dir / "spec.yaml") == spec  # what resume reads back


@pytest.mark.parametrize(
    ("extra", "overrides"),
    [
        ("logging: {project: '${oc.env:PATS_FAKE_KEY}'}\n", []),
        ("trainer: {steps: '${oc.env:PATS_FAKE_KEY}'}\n", []),  # would be quoted by "not a whole number"
        ("logging: {project: 'k-${oc.env:PATS_FAKE_KEY,none}'}\n", []),
        (f"logging: {{project: {PLANTED}}}\n", []),  # pasted in
        ("", ["logging.project=${oc.env:PATS_FAKE_KEY}"]),
    ],
)
def test_spec_that_copies_a_key_in_is_refused_without_quoting_it(write, extra, overrides):
    with pytest.raises(SpecError) as info:
        load_spec(write("s.yaml", SPEC + extra), overrides)
    no_key(str(info.value))
    (issue,) = info.value.issues
    assert issue.path in {"logging.project", "trainer.steps"}
    assert f"holds the value of the environment variable {KEY_ENV}" in issue.message


def test_key_of_a_variable_that_api_key_env_names_is_protected_too(write, monkeypatch):
    """The name need not look secret: naming it in api_key_env makes it one."""
    monkeypatch.setenv("PATS_PLAIN_NAME", PLANTED)
    text = SPEC.replace(KEY_ENV, "PATS_PLAIN_NAME") + "logging: {project: '${oc.env:PATS_PLAIN_NAME}'}\n"
    with pytest.raises(SpecError, match="environment variable PATS_PLAIN_NAME") as info:
        load_spec(write("s.yaml", text))
    no_key(str(info.value))


def test_ordinary_environment_interpolation_still_works(write, monkeypatch):
    monkeypatch.setenv("PATS_DATA", "/data/pats")
    spec = load_spec(write("s.yaml", SPEC + "logging: {root: '${oc.env:PATS_DATA}/runs'}\n"))
    assert spec.logging.root == "/data/pats/runs"


# -- (b) a missing variable is named -------------------------------------------------------------


def test_missing_key_variable_is_named(monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(PrerequisiteError) as info:
        build_lm(LLMSpec(model="openai/gpt-4o-mini", api_key_env=KEY_ENV))
    assert f"environment variable {KEY_ENV} is not set" in str(info.value)


def test_empty_key_variable_counts_as_missing(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "")
    with pytest.raises(PrerequisiteError, match=KEY_ENV):
        build_lm(LLMSpec(model="openai/gpt-4o-mini", api_key_env=KEY_ENV))


# -- (c) keys are masked in error messages -------------------------------------------------------


def test_mask_secrets_in_an_exception_message():
    try:
        raise RuntimeError(
            f"AuthenticationError: Incorrect API key provided: {PLANTED}. Other keys tried: "
            "sk-proj-AbC_def-123456, sk-ant-api03-XYZ; see https://platform.openai.com/account"
        )
    except RuntimeError as err:
        masked = mask_secrets(str(err), [KEY_ENV])
    no_key(masked)
    assert "sk-proj" not in masked and "sk-ant" not in masked
    assert masked.startswith(
        "AuthenticationError: Incorrect API key provided: ***. Other keys tried: ***, ***"
    )
    assert "platform.openai.com" in masked


def test_mask_secrets_masks_a_key_without_the_sk_prefix(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "hf_PLANTEDtoken42")
    masked = mask_secrets("401 for token hf_PLANTEDtoken42 (repo x)", [KEY_ENV, None])
    assert masked == "401 for token *** (repo x)"


async def test_judge_error_from_a_rejected_key_is_masked():
    script = [{"status": 401, "message": f"Incorrect API key provided: {PLANTED}"}]
    with ScriptedOpenAIServer(script) as server:
        caller = LLMCaller(
            LLMSpec(model="openai/scripted", api_base=server.base_url, api_key_env=KEY_ENV, max_retries=0)
        )
        import dspy

        class Ask(dspy.Signature):
            """Answer the question."""

            question: str = dspy.InputField()
            answer: str = dspy.OutputField()

        with pytest.raises(JudgeError) as info:
            await caller.call(dspy.Predict(Ask), question="sky?")
        caller.close()
    no_key(str(info.value))
    assert server.requests, "the request reached the server"


# -- (d) YAML cannot run code --------------------------------------------------------------------


@pytest.mark.parametrize(
    "tagged",
    [
        "!!python/object/apply:os.system ['touch {marker}']",
        "!!python/object/apply:subprocess.call [['touch', '{marker}']]",
        "!!python/name:os.system",
        "!!python/object/new:os.system ['touch {marker}']",
    ],
)
def test_python_tags_are_refused_and_nothing_runs(write, tmp_path, tagged):
    marker = tmp_path / "executed"
    value = tagged.format(marker=marker)
    for path, overrides in [
        (write("s.yaml", f"name: {value}\nenvironment: {{kind: twx}}\n"), []),
        (write("base.yaml", f"seed: {value}\n") and write("top.yaml", "defaults: [base.yaml]\n" + SPEC), []),
        (write("good.yaml", SPEC), [f"name={value}"]),
    ]:
        with pytest.raises(SpecError) as info:
            load_spec(path, overrides)
        assert "python/" in str(info.value)  # the message names the refused tag
        assert not marker.exists(), f"{value} was executed"
