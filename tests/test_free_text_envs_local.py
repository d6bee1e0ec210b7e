"""Free-text environments (webshop, search_qa) on the local backend with the real SmolLM2 in generate
mode: the environment receives the policy's whole output, and whatever the 135M model writes becomes a
valid step or an invalid one with a reason, never a crash."""

from __future__ import annotations

import json

import pytest

from pats.spec import load_spec
from pats.testing.engine import play_group

pytestmark = pytest.mark.slow


def check(played):
    assert len(played.group.rollouts) == 2
    for rollout in played.group.rollouts:
        assert rollout.turns and not rollout.error
        for turn in rollout.turns:
            assert turn.valid or turn.invalid_reason, "an invalid action must say why"
            assert 0 < turn.response_tokens <= 8
        assert len(played.training[rollout.id]) == len(rollout.turns)  # one TrainItem per turn with output


def test_webshop_episodes_on_the_local_backend(repo):
    """Guards WebShop's free-text path on the local backend: the real model's output, whatever it is,
    becomes a valid or invalid step and a TrainItem. One group of 2 episodes, 2 turns of 8 tokens."""
    spec = load_spec(
        repo / "experiments/webshop/demo.yaml", ["environment.max_turns=2", "policy.max_new_tokens=8"]
    )
    check(play_group(spec))


def test_search_qa_episodes_on_the_local_backend(repo, tmp_path):
    """Guards search-QA's free-text path on the local backend (search calls, answers), as above, on a
    one-document corpus and one question: one group of 2 episodes, 2 turns of 8 tokens."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "1", "contents": '"Paris"\nParis is the capital of France.'}) + "\n")
    questions = tmp_path / "q.jsonl"
    questions.write_text(
        json.dumps({"question": "What is the capital of France?", "golden_answers": ["Paris"]})
    )
    spec = load_spec(
        repo / "experiments/search_qa/pats.yaml",
        [
            f"environment.train_data=[{questions}]",
            f"environment.eval_data=[{questions}]",
            f"environment.retriever.corpus={corpus}",
            "environment.max_turns=2",
            "policy.model=smollm2-135m-instruct",
            "policy.dtype=float32",
            "policy.max_new_tokens=8",
            "trainer.backend=local",
        ],
    )
    check(play_group(spec))
