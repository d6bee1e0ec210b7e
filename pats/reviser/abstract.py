"""Turn one game's actions into family-level patterns that can reach other games of the same type.

A plan such as "take black pepper -> put black pepper in shelf" helps only the game it came from; at
type scope it quotes that game's objects into every other game's prompt. Here an action is split into
its verb and its arguments (`take X`, `put X in Y`, `cook X in Y`, `take X from Y`, `go to Y`,
`open door to D`), and each argument is kept word for word only when it is the family's vocabulary:
seen in the actions of at least `min_tasks` different tasks of the type (`coin`, `cookbook`, `meal`,
`knife` recur; `black pepper` does not). Other arguments are replaced by their role (`<object>`,
`<place>`, `<tool>`, `<direction>`), so the text carries the game-independent action strings a
likelihood-choosing policy can match (`take cookbook`, `prepare meal`, `put <object> in <place>`).

Where it departs from a learned abstraction (an LLM writing "take the item the task names"): the
roles come from a fixed preposition grammar shared by TextWorldExpress and ALFWorld actions, and the
vocabulary rule needs several tasks' trajectories; with a single task every argument becomes a role.
ALFWorld's instance numbers ("apple 1") are dropped before comparing arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pats.actions import ROLES, split_action

DIRECTIONS = frozenset({"north", "south", "east", "west", "up", "down"})
PARTICLES = frozenset({"around"})  # 'look around': part of the verb, never an object
NUMBER = re.compile(r"\s+\d+$")
MAX_PATTERN_ACTIONS = 16


def argument_key(arg: str) -> str:
    """An argument as compared across games: lower case, without ALFWorld's instance number."""
    return NUMBER.sub("", arg.strip().lower())


def family_vocabulary(
    trajectories: Iterable[tuple[str, Sequence[str]]], min_tasks: int = 2
) -> frozenset[str]:
    """Arguments (by `argument_key`) that appear in the actions of at least `min_tasks` distinct tasks.
    `trajectories`: (task id, actions) pairs, several per task allowed."""
    seen: dict[str, set[str]] = {}
    for task_id, actions in trajectories:
        for action in actions:
            for _, arg in split_action(action)[1]:
                seen.setdefault(argument_key(arg), set()).add(task_id)
    return frozenset(a for a, tasks in seen.items() if len(tasks) >= max(1, min_tasks))


def abstract_action(action: str, vocabulary: frozenset[str]) -> str:
    """The action with every argument outside the family vocabulary replaced by its role."""
    verb, args = split_action(action)
    if not verb:
        return ""
    parts = [verb]
    for prep, arg in args:
        key = argument_key(arg)
        if key in DIRECTIONS:
            word = "<direction>"
        elif key in vocabulary or key in PARTICLES:
            word = key
        else:
            word = ROLES[prep]
        parts += [prep, word] if prep else [word]
    return " ".join(parts)


def pattern(actions: Sequence[str], vocabulary: frozenset[str]) -> list[str]:
    """Abstracted actions with immediate repeats of one or two actions folded ('a -> b (2 times)').
    An action the game repeated word for word counts once (it is a retry, not a second object)."""
    literal = [
        a.strip()
        for i, a in enumerate(actions)
        if a.strip() and (i == 0 or a.strip() != actions[i - 1].strip())
    ]
    steps = [a for a in (abstract_action(x, vocabulary) for x in literal) if a]
    out: list[str] = []
    i = 0
    while i < len(steps):
        for size in (1, 2):
            block = steps[i : i + size]
            n = 1
            while len(block) == size and steps[i + n * size : i + (n + 1) * size] == block:
                n += 1
            if n > 1:
                out.append(" -> ".join(block) + f" ({n} times)")
                i += n * size
                break
        else:
            out.append(steps[i])
            i += 1
    return out


def pattern_text(actions: Sequence[str], vocabulary: frozenset[str]) -> str:
    steps = pattern(actions, vocabulary)
    text = " -> ".join(steps[:MAX_PATTERN_ACTIONS])
    return text + (" -> ..." if len(steps) > MAX_PATTERN_ACTIONS else "")


def game_words(actions: Iterable[str], vocabulary: frozenset[str]) -> set[str]:
    """The arguments of these actions that are not family vocabulary: what must not reach type scope."""
    out = set()
    for action in actions:
        for _, arg in split_action(action)[1]:
            key = argument_key(arg)
            if key not in vocabulary and key not in DIRECTIONS and key not in PARTICLES:
                out.add(key)
    return out


def family_pattern(
    trajectories: Sequence[tuple[str, Sequence[str]]], vocabulary: frozenset[str] | None = None
) -> tuple[str, int] | None:
    """The most common abstracted pattern among winning trajectories of several tasks of one type, and
    how many tasks share it; None without trajectories. `vocabulary` defaults to the trajectories'
    own (`family_vocabulary`). Ties go to the shorter pattern (fewer actions for the policy to read),
    then to the first seen."""
    if not trajectories:
        return None
    if vocabulary is None:
        vocabulary = family_vocabulary(trajectories)
    counts: dict[str, set[str]] = {}
    for task_id, actions in trajectories:
        text = pattern_text(actions, vocabulary)
        if text:
            counts.setdefault(text, set()).add(task_id)
    if not counts:
        return None
    best = max(counts, key=lambda t: (len(counts[t]), -t.count("->")))
    return best, len(counts[best])
