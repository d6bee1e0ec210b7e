"""The review with an LLM reviser behind a real HTTP server on 127.0.0.1: faults are retried,
invalid edit sets are retried once with their errors, then the rules reviser answers; training goes
on and nothing is lost."""

from __future__ import annotations

import asyncio
import json

from pats.logging.events import EditEvent, FallbackEvent, RefusedEvent, StepEndEvent, read_events
from pats.reviser import LLMReviser, RulesReviser
from pats.spec.models import ExperimentSpec
from pats.testing import ScriptedBackend, ScriptedOpenAIServer, improving_schedule
from pats.testing.engine import fake_engine

INVALID = [
    {"op": "ADD", "kind": "skill", "scope": "general", "text": "Be careful.", "cites": ["c-nope", "c-gone"]}
]
WIRE_INVALID = f"[[ ## edits ## ]]\n{json.dumps(INVALID)}\n\n[[ ## completed ## ]]"
WIRE_WRONG_SCHEMA = '[[ ## edits ## ]]\n{"op": "ADD", "scope": 7}\n\n[[ ## completed ## ]]'


def spec_for(base_url: str) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "llm-review",
            "environment": {"kind": "twx"},
            "scaffold": {"mode": "pats"},
            "reviser": {
                "kind": "llm",
                "llm": {
                    "model": "openai/scripted",
                    "api_base": base_url,
                    "api_key_env": "PATS_TEST_KEY",
                    "timeout_s": 1.0,
                    "max_retries": 1,
                    "backoff_s": 0.01,
                },
            },
            "trainer": {"steps": 3, "tasks_per_step": 4, "group_size": 4},
            "eval": {"every": 10, "at_start": False, "with_scaffold": False},
        }
    )


def train_three_steps(spec: ExperimentSpec, tmp_path, count_tokens):
    """The engine with the scripted backend on FakeEnv tasks; returns the scaffold policy it used."""
    engine = fake_engine(spec, tmp_path, ScriptedBackend(improving_schedule(), seed=5), count_tokens)
    asyncio.run(engine.run())
    engine.events.close()
    return engine.scaffold


def test_faults_and_invalid_sets_fall_back_to_rules(tmp_path, count_tokens, monkeypatch):
    monkeypatch.setenv("PATS_TEST_KEY", "sk-test-PLANTED")
    script = [
        {"status": 429, "retry_after": 0.05},
        {"delay": 3.0},
        {"malformed": True},
        {"status": 503},
        {"truncated": True},
        WIRE_WRONG_SCHEMA,
    ] + [WIRE_INVALID] * 60
    with ScriptedOpenAIServer(script) as server:
        scaffold = train_three_steps(spec_for(server.base_url), tmp_path, count_tokens)
        reviewer = scaffold.reviewer
        assert isinstance(reviewer.reviser, LLMReviser) and isinstance(reviewer.fallback, RulesReviser)
        requests = len(server.requests)

    log = tmp_path / "events.jsonl"
    ends = read_events(log, StepEndEvent)
    assert [e.step for e in ends] == [0, 1, 2], "a failing reviser must not cost a training step"
    faults = sum(e.metrics["review/llm_faults"] for e in ends)
    assert faults >= 6  # 429, timeout, non-JSON body, 503, truncated body, wrong schema: each counted
    kinds = reviewer.reviser.faults
    assert kinds["rate_limit"] == 1 and kinds["timeout"] >= 1 and kinds["server_error"] >= 1
    assert kinds["malformed"] >= 1, dict(kinds)
    refused = [e.problem for e in read_events(log, RefusedEvent)]
    assert any("attempt 1" in p for p in refused) and any("attempt 2" in p for p in refused)
    assert any("c-nope" in p for p in refused)
    assert read_events(log, FallbackEvent), "the rules reviser should have answered"
    adds = [e for e in read_events(log, EditEvent) if e.edit.op == "ADD"]
    assert adds and all("Be careful." not in e.edit.text for e in adds)
    assert requests >= 6
    assert "sk-test-PLANTED" not in log.read_text()


def test_a_reviser_endpoint_that_refuses_connections_costs_no_step(tmp_path, count_tokens, monkeypatch):
    import socket

    monkeypatch.setenv("PATS_TEST_KEY", "sk-test")
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    scaffold = train_three_steps(spec_for(f"http://127.0.0.1:{port}/v1"), tmp_path, count_tokens)
    ends = read_events(tmp_path / "events.jsonl", StepEndEvent)
    assert [e.step for e in ends] == [0, 1, 2]
    assert scaffold.reviewer.reviser.faults["connection"] >= 3
    assert all(e.metrics["review/fallback"] == 1.0 for e in ends)


def test_llm_calls_and_their_latency_reach_the_step_metrics(tmp_path, count_tokens, monkeypatch):
    monkeypatch.setenv("PATS_TEST_KEY", "sk-test")
    with ScriptedOpenAIServer([{"delay": 0.2, "text": WIRE_INVALID}] * 60) as server:
        train_three_steps(spec_for(server.base_url), tmp_path, count_tokens)
        log = list(server.answered)
    ends = [e.metrics for e in read_events(tmp_path / "events.jsonl", StepEndEvent)]
    calls = sum(m["review/llm_calls"] for m in ends)
    # Every request the server handled is one call: the reviser's structured-output probe (refused by
    # this server: a call, not a fault) and its answers.
    assert calls == len(log) >= 3 and [a.kind for a in log].count("probe") == 1
    assert all(m["review/llm_faults"] == 0 for m in ends)
    assert sum(m["review/llm_tokens"] for m in ends) == sum(a.tokens for a in log) > 0
    for m in ends:
        if m["review/llm_calls"]:
            assert m["review/llm_seconds_per_call"] >= 0.2 * (m["review/llm_calls"] - 1) / m[
                "review/llm_calls"
            ] and m["review/llm_seconds"] >= 0.2 * (m["review/llm_calls"] - 1)
            assert m["review/llm_tokens_per_call"] == m["review/llm_tokens"] / m["review/llm_calls"]
            assert m["time/review_overlap_s"] <= m["time/review_s"] + 1e-9
