"""Prompts for text environments, and reading an action back out of free text.

`render_prompt` builds the bare prompt: the system part holds the environment's instructions and the
task description, the user part the last few action/observation pairs, the current observation and,
when given, the admissible actions. The training scaffold is placed by pats.scaffold.render.place:
appended to the system part, or handed in here as `guidance` and rendered in the turn right before
the admissible actions. Without a scaffold the prompt is exactly what this function returns with no
guidance, and the deployment prompt stays byte-identical to the training prompt minus the guidance.

Instruction texts are data (each environment section's `INSTRUCTIONS` in pats.spec.environments, and
`OUTPUT_FORMAT` here, one entry per action mode); they state the rules and the answer format only,
never advice on how to play (that is the scaffold's job, and the bare prompt is the evaluation
prompt). Only a window of recent steps is shown (`environment.window`: `history_window`, else the
environment's default, 2 for most: what worked for a 135M policy on TextWorld Commonsense). No
reasoning tag (`<think>`) is asked for; a small policy spends its tokens better on the action.

`parse_action` is lenient on purpose (tags, quotes, a trailing period, near-misses of an admissible
action), so that a turn counts as invalid for choosing a wrong action, not for formatting.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pats.spec.environments import SECTIONS

OUTPUT_FORMAT: dict[str, str] = {
    "generate": (
        "Reply with exactly one admissible action inside action tags, for example "
        "<action>look around</action>, and nothing else."
    ),
    "score": "Reply with exactly one admissible action, and nothing else.",
}

MAX_ACTION_CHARS = 200
FUZZY_CUTOFF = 0.9  # difflib ratio needed to accept a near-miss of an admissible action

_TAG = re.compile(r"<action>(.*?)(?:</action>|$)", re.IGNORECASE | re.DOTALL)
_LABEL = re.compile(r"^(?:action|next action|command)\s*[:=]\s*", re.IGNORECASE)
_EDGE = " \t\"'`*>-.,;:!?"  # quotes, markdown bullets and punctuation around an action


@dataclass(frozen=True)
class PromptParts:
    system: str
    user: str


def instructions(env_kind: str, action_mode: Literal["generate", "score"]) -> str:
    """The instruction text for an environment kind (its section's INSTRUCTIONS) and how the policy
    answers (free-text environments state their own format)."""
    try:
        section = SECTIONS[env_kind]
    except KeyError:
        raise KeyError(f"no environment kind '{env_kind}'; known: {', '.join(SECTIONS)}") from None
    if section.FREE_TEXT:
        return section.INSTRUCTIONS
    return f"{section.INSTRUCTIONS}\n{OUTPUT_FORMAT[action_mode]}"


def render_prompt(
    instructions: str,
    task_description: str,
    history: Sequence[tuple[str, str]],
    observation: str,
    admissible: Sequence[str] | None,
    window: int,
    guidance: str = "",
) -> PromptParts:
    """System: instructions and task. User: the last `window` (action, observation) pairs, the
    current observation, then `guidance` (the scaffold placed in the turn, see
    pats.scaffold.render.place) and the admissible actions (when given)."""
    system = instructions.strip()
    if task_description.strip():
        system += f"\n\nTask: {task_description.strip()}"

    blocks = []
    recent = list(history)[-window:] if window > 0 else []
    if recent:
        lines = ["Recent history:"]
        for action, seen in recent:
            lines += [f"> {action.strip()}", seen.strip()]
        blocks.append("\n".join(lines))
    blocks.append(f"Observation: {observation.strip()}")
    if guidance:
        blocks.append(guidance)
    if admissible is not None:
        blocks.append(admissible_line(admissible))
    return PromptParts(system=system, user="\n\n".join(blocks))


def admissible_line(admissible: Sequence[str]) -> str:
    """The turn's last line: the admissible actions (also pmi scoring's neutral premise, alone)."""
    return f"Admissible actions: {', '.join(admissible)}"


def parse_action(text: str, admissible: Sequence[str] | None) -> tuple[str, bool, str]:
    """Read one action from the policy's text: (action, valid, reason).

    The action is the content of the first `<action>...</action>` tag (an unclosed tag runs to the
    end), else the first non-empty line, without quotes, labels or edge punctuation. With `admissible`
    it must match one of them: exactly (case-insensitive), else as a unique prefix covering at least
    half of the action, else by starting with an action followed by more words (the longest such),
    else by a unique difflib match at ratio >= 0.9; the game's spelling is returned. Without
    `admissible` any non-empty text is accepted. Empty, garbage and over-long outputs give
    ("", False, reason); a readable action that matches nothing is returned with valid=False.
    """
    if not text.strip():
        return "", False, "empty output"
    tag = _TAG.search(text)
    source = tag.group(1) if tag else text
    line = next((ln for ln in source.splitlines() if ln.strip()), "")
    candidate = " ".join(_LABEL.sub("", line.strip()).strip(_EDGE).split())
    if not candidate or not re.search(r"[a-zA-Z]", candidate):
        return "", False, "no action in the output"
    if len(candidate) > MAX_ACTION_CHARS:
        return "", False, f"over-long action ({len(candidate)} characters, at most {MAX_ACTION_CHARS})"
    if admissible is None:
        return candidate, True, ""
    return _match(candidate, admissible)


def _match(candidate: str, admissible: Sequence[str]) -> tuple[str, bool, str]:
    spelled = {a.lower(): a for a in admissible}  # the game's spelling of each action
    low = candidate.lower()
    if low in spelled:
        return spelled[low], True, ""

    starts = [a for a in spelled if a.startswith(low)]
    prefixed = [a for a in starts if 2 * len(low) >= len(a)]  # "o" is no way to say "open wardrobe"
    if len(prefixed) == 1:
        return spelled[prefixed[0]], True, ""

    # "take apple from the table" -> "take apple": an action followed by extra words.
    heads = [a for a in spelled if low.startswith(a + " ")]
    if heads:
        return spelled[max(heads, key=len)], True, ""

    close = difflib.get_close_matches(low, list(spelled), n=2, cutoff=FUZZY_CUTOFF)
    if len(close) == 1 or (
        len(close) == 2 and _ratio(low, close[0]) > _ratio(low, close[1])  # a clear best match
    ):
        return spelled[close[0]], True, ""
    if close or len(starts) > 1:
        options = ", ".join(spelled[a] for a in (close or starts)[:5])
        return candidate, False, f"'{candidate}' is ambiguous between: {options}"
    return candidate, False, f"'{candidate}' is not an admissible action"


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()
