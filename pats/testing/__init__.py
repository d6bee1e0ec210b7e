"""Test doubles for pats users: fakes that let an environment, judge or reviser be tested offline."""

from pats.testing.cards import card_facts, evidence_card
from pats.testing.fakes import FakeEnv, RaisingJudge, ScriptedBackend, improving_schedule
from pats.testing.llm import scripted_judge, scripted_reviser
from pats.testing.model_server import ServedModel
from pats.testing.openai_server import ScriptedOpenAIServer
from pats.testing.vllm_server import VLLMServer

__all__ = [
    "FakeEnv",
    "RaisingJudge",
    "ScriptedBackend",
    "ScriptedOpenAIServer",
    "ServedModel",
    "VLLMServer",
    "card_facts",
    "evidence_card",
    "improving_schedule",
    "scripted_judge",
    "scripted_reviser",
]
