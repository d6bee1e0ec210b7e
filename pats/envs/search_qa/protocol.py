"""The Search-R1 text protocol: reading an action out of the policy's output, writing observations.

Reading follows Search-R1's `LLMGenerationManager.postprocess_predictions`
(search_r1/llm_agent/generation.py): the first complete `<search>...</search>` or
`<answer>...</answer>` (case-sensitive tags, content stripped) is the action; anything else is invalid.
Where this departs from Search-R1: an empty or over-long query or answer is an invalid action here
(Search-R1 sends an empty query to the retriever and scores an empty answer 0), and each invalid output
gets a reason for the evidence cards. Passages are written as Search-R1's `_passages2string` writes
them, "Doc i(Title: <first line>) <rest>", inside `<information>...</information>` as in its
`execute_predictions`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MAX_CONTENT_CHARS = 500  # a query or answer longer than this is not a query or an answer
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)

# Search-R1's observation after an invalid action, so the policy learns the format from it.
INVALID_OBSERVATION = (
    "My previous action is invalid. If I want to search, I should put the query between <search> and "
    "</search>. If I want to give the final answer, I should put the answer between <answer> and "
    "</answer>. Let me try again."
)


@dataclass(frozen=True)
class Action:
    kind: Literal["search", "answer"] | None  # None: invalid
    content: str = ""
    reason: str = ""  # why it is invalid


@dataclass(frozen=True)
class Passage:
    id: str
    contents: str  # '"Title"\ntext', the wiki-18 / FlashRAG corpus format
    score: float = 0.0


def parse_output(text: str) -> Action:
    """The first complete <search> or <answer> tag of the policy's output, or why there is none."""
    if not text.strip():
        return Action(None, reason="empty output")
    match = _ACTION.search(text)
    if match is None:
        unclosed = [tag for tag in ("search", "answer") if f"<{tag}>" in text and f"</{tag}>" not in text]
        if unclosed:
            return Action(None, reason=f"<{unclosed[0]}> without </{unclosed[0]}>")
        return Action(None, reason="no <search>...</search> or <answer>...</answer> in the output")
    kind, content = match.group(1), match.group(2).strip()
    if not content:
        return Action(None, reason=f"empty <{kind}>")
    if len(content) > MAX_CONTENT_CHARS:
        return Action(
            None, reason=f"over-long {kind} ({len(content)} characters, at most {MAX_CONTENT_CHARS})"
        )
    # (ignore: a str to the Literal kind; the pattern matches only "search" and "answer")
    return Action(kind, content)  # type: ignore[arg-type]


def format_passages(passages: Sequence[Passage]) -> str:
    """Search-R1's `_passages2string`: the first line of a passage is its title."""
    lines = []
    for i, passage in enumerate(passages, start=1):
        title, _, text = passage.contents.partition("\n")
        lines.append(f"Doc {i}(Title: {title}) {text}")
    return "\n".join(lines)


def information(passages: Sequence[Passage]) -> str:
    return f"<information>{format_passages(passages).strip()}</information>"
