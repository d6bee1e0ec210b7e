"""Failure-mode detection on one rollout, for the `failure` evidence card.

`detect_failures(rollout)` returns one `FailureEvent` per occurrence, ordered by turn:
- `malformed_output`: the policy's output gave no action (`Turn.action` is empty). Such a turn is only
  malformed, never also invalid, repeated or part of a loop.
- `invalid_action`: the environment rejected the action (`Turn.valid` is False).
- `repeated_action`: the same action on consecutive turns; one event per run, at its second turn.
- `loop`: a cycle of 2 or 3 actions played at least twice in a row (a,b,a,b or a,b,c,a,b,c); one event
  per loop, at its first turn. A "cycle" of one action (a,a,a,a) is a repeat, not a loop.
- `out_of_turns`: the rollout was truncated, at its last turn.
- `env_error`: the rollout ended with an environment or backend error, at its last turn.

Where this departs from the published method: actions are compared after lower-casing and collapsing
whitespace ("Go  North" repeats "go north"), since text environments parse them that way; and
`max_turns`, when given, also flags an unsuccessful, error-free rollout that used every turn as
`out_of_turns`, for backends that do not set `Rollout.truncated`. Excerpts are capped at
`EXCERPT_CHARS` characters to keep card data short; the card text is bounded by tokens in `build.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

# FailureEvent and the mode names live with the card records in pats.types: FailureData holds them.
from pats.actions import normalize_action
from pats.types import FAILURE_MODES, FailureEvent, FailureMode, Rollout

EXCERPT_CHARS = 120
LOOP_LENGTHS = (2, 3)


def excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3].rstrip() + "..."


def detect_failures(rollout: Rollout, max_turns: int | None = None) -> list[FailureEvent]:
    turns = rollout.turns
    actions = [normalize_action(t.action) for t in turns]
    last = max(len(turns) - 1, 0)
    events: list[FailureEvent] = []

    def add(mode: FailureMode, turn: int, text: str) -> None:
        events.append(FailureEvent(mode=mode, rollout_id=rollout.id, turn=turn, excerpt=excerpt(text)))

    for i, turn in enumerate(turns):
        if not actions[i]:
            add("malformed_output", i, turn.output or "(empty output)")
        elif not turn.valid:
            reason = f" -> {turn.invalid_reason}" if turn.invalid_reason else ""
            add("invalid_action", i, turn.action.strip() + reason)
    # Excerpts quote the actions alone: the rules reviser puts them into its lessons as they are.
    for start in _runs(actions):
        add("repeated_action", start + 1, turns[start].action.strip())
    for start, size in _loops(actions):
        add("loop", start, " | ".join(t.action.strip() for t in turns[start : start + size]))

    used_all_turns = max_turns is not None and len(turns) >= max_turns and not rollout.success
    if rollout.truncated or (used_all_turns and not rollout.error.strip()):
        final = f", last action: {turns[-1].action.strip()}" if turns else ""
        add("out_of_turns", last, f"stopped after {len(turns)} turns{final}")
    if rollout.error.strip():
        add("env_error", last, rollout.error)

    # Stable order: by turn, then in the order of FAILURE_MODES.
    return sorted(events, key=lambda e: (e.turn, FAILURE_MODES.index(e.mode)))


def _runs(actions: Sequence[str]) -> list[int]:
    """The start of every run of two or more equal, non-empty actions."""
    runs = []
    i = 0
    while i < len(actions):
        j = i
        while actions[i] and j + 1 < len(actions) and actions[j + 1] == actions[i]:
            j += 1
        if j > i:
            runs.append(i)
        i = j + 1
    return runs


def _loops(actions: Sequence[str]) -> list[tuple[int, int]]:
    """(start, cycle length) of every cycle of 2-3 actions played at least twice in a row.

    Scans left to right and skips past a found loop, so a,b,a,b,a,b is one loop, not two.
    """
    loops = []
    i = 0
    while i < len(actions):
        step = 1
        for size in LOOP_LENGTHS:
            cycle = list(actions[i : i + size])
            # An empty action breaks a loop (it is malformed), and one action alone is a repeat.
            if len(cycle) < size or "" in cycle or len(set(cycle)) == 1:
                continue
            times = 1
            while list(actions[i + times * size : i + (times + 1) * size]) == cycle:
                times += 1
            if times >= 2:
                loops.append((i, size))
                step = times * size
                break
        i += step
    return loops
