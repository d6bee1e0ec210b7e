"""An LLM judge and reviser answering from a script, through DSPy's own `DummyLM`.

For testing code that uses pats' LLM components without a model or a server:

    reviser = scripted_reviser([[{"op": "ADD", "kind": "skill", "scope": "type:twc", "text": "...",
                                  "cites": ["c1-...-outcome", "c1-...-failure"]}]])
    judge = scripted_judge([[{"entry_id": "e1", "label": "stale", "reason": "...", "cites": [...]}]])

Each inner list is one answer (one LLM call), served in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pats.spec.models import LLMJudgeSpec, LLMReviserSpec, LLMSpec, ScaffoldBudget

MODEL = "openai/scripted"  # never called: DummyLM answers instead


def scripted_reviser(answers: Sequence[Any], **options):
    """An LLMReviser whose calls return `answers` in order (lists of edit dicts, or raw strings)."""
    from pats.lm.caller import require_llm

    require_llm()
    from dspy.utils import DummyLM

    from pats.reviser import LLMReviser
    from pats.reviser.prompt import ReviserSettings

    spec = LLMReviserSpec(llm=LLMSpec(model=MODEL, max_retries=options.pop("max_retries", 0)))
    return LLMReviser(spec, ReviserSettings(**options), lm=DummyLM([{"edits": a} for a in answers]))


def scripted_judge(answers: Sequence[Any], environment: str = "twx", budget: ScaffoldBudget | None = None):
    """An LLMJudge whose grading calls return `answers` in order (lists of verdict dicts, or strings)."""
    from pats.lm.caller import require_llm

    require_llm()
    from dspy.utils import DummyLM

    from pats.judges import LLMJudge

    spec = LLMJudgeSpec(llm=LLMSpec(model=MODEL, max_retries=0))
    return LLMJudge(
        spec, budget or ScaffoldBudget(), environment, lm=DummyLM([{"verdicts": a} for a in answers])
    )
