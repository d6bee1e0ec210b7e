"""What a task plan holds, and which of its steps a turn should name next.

A plan is the whole path to the goal, as steps the policy can act on (DESIGN.md, the scaffold store):
- `plan_of(actions)`: the plan an action sequence shows (an expert plan, or a won episode's actions):
  blanks and immediate repeats dropped, steps that change nothing in the game dropped (`changes_nothing`:
  look, look around, inventory, examine ...), then detours dropped (`without_detours`), and nothing cut:
  every remaining step is kept, however long the path.
- `next_step(steps, taken, admissible)`: the step a "Next action" line names: the first step not yet
  taken that the game accepts now; a step the game does not accept now gives way to the next one it
  does; None once every step is taken.
- `warned_actions` / `prescribed_actions`: what an entry's text warns against (quoted actions of a
  mistake, or of a sentence that says do not / never / avoid) and what it prescribes (the steps of a
  step list, a plan's or a skill's pattern), for the validator's rule that no entry of a view warns
  against what another prescribes (pats.scaffold.validate). Compared literally after
  `normalize_action`: "<object>" in a pattern is text, not a wildcard.

Steps are compared as the cards compare actions (`normalize_action`: lower case, single spaces).

Where it departs from the published method: the paper's plans are free text from an LLM; these rules are
ours, for the action grammar TextWorldExpress and ALFWorld share (pats.actions.split_action).
A detour is found from the actions alone (no replay), so a step is dropped only where a later step
plainly undoes it or nothing later needs it: a `put O in P` that a later `take O` undoes (with that
take), an `open C` that a later `close C` undoes (with that close), an `open C` that no later step
names while no later step takes a new object, and a `go to X` followed straight by another `go to`;
never the last step (where the path ends: a won episode's winning action).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pats.actions import normalize_action, split_action

# Verbs of actions that only show something: the game's state is the same after them. Shared by the
# text games pats ships (TextWorldExpress: "look around", "inventory"; ALFWorld: "look", "inventory",
# "examine X"). Data, not logic: an environment with other such verbs extends this set.
OBSERVATION_VERBS = frozenset({"look", "inventory", "examine", "l", "i", "x"})
TAKE_VERBS = frozenset({"take", "pick"})
QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"")
NEGATION = re.compile(r"\b(?:do not|don't|never|avoid|stop)\b", re.IGNORECASE)
STEP_ARROW = " -> "  # between a step list's steps (pats.scaffold.render.STEP_SEPARATOR)
STEP_NOTE = re.compile(r"\s*\((?:\d+ times|done|next)\)$|\s*\[(?:done|next)\]$")  # "(2 times)", marks
PUT_VERBS = frozenset({"put", "drop", "place", "insert"})


def changes_nothing(action: str) -> bool:
    """Whether the action only shows something (look around, inventory, examine X)."""
    verb, _ = split_action(normalize_action(action))
    return verb in OBSERVATION_VERBS


def plan_of(actions: Sequence[str]) -> list[str]:
    """The plan an action sequence shows: the steps that move the game, in order, none cut."""
    kept: list[str] = []
    for a in (" ".join(a.split()) for a in actions):
        if a and not changes_nothing(a) and (not kept or normalize_action(kept[-1]) != normalize_action(a)):
            kept.append(a)
    return without_detours(kept)


def without_detours(steps: Sequence[str]) -> list[str]:
    """`steps` without the steps that lead nowhere (see the module's docstring), until none is left."""
    out = list(steps)
    while True:
        drop = _undone_pair(out) or _useless_step(out)
        if not drop:
            return out
        out = [s for i, s in enumerate(out) if i not in drop]


def _parts(step: str) -> tuple[str, str, str]:
    """(verb, first argument, place) of a step, normalized: ('put', 'clean spoon', 'counter')."""
    verb, args = split_action(normalize_action(step))
    first = next((a for prep, a in args if prep == ""), "")
    place = next((a for prep, a in args if prep), "")
    return verb, first, place


def _names(step: str, thing: str) -> bool:
    """Whether the step has `thing` as one of its arguments."""
    _, args = split_action(normalize_action(step))
    return any(a == thing for _, a in args)


def _undone_pair(steps: Sequence[str]) -> set[int]:
    """The first (put O, later take O) or (open C, later close C) with no step between naming the
    object: the second undoes the first, so both lead nowhere."""
    parts = [_parts(s) for s in steps]
    for i, (verb, thing, _) in enumerate(parts):
        undo = TAKE_VERBS if verb in PUT_VERBS else {"close"} if verb == "open" else None
        if not undo or not thing:
            continue
        for j in range(i + 1, len(steps)):
            if parts[j][0] in undo and parts[j][1] == thing:
                return {i, j}
            if _names(steps[j], thing):
                break  # the object is used in between: the first step was not undone
    return set()


def _useless_step(steps: Sequence[str]) -> set[int]:
    """An `open C` that nothing later needs, or a `go to X` followed straight by another `go to`."""
    parts = [_parts(s) for s in steps]
    for i, (verb, thing, _) in enumerate(parts[:-1]):  # the last step is where the path ends: never a detour
        later = steps[i + 1 :]
        if verb == "open" and thing:
            taken_before = {p[1] for p in parts[:i] if p[0] in TAKE_VERBS}
            # A later take without a source may take an object out of C: keep C open for it.
            new_take = any(
                p[0] in TAKE_VERBS and not p[2] and p[1] not in taken_before for p in parts[i + 1 :]
            )
            if not any(_names(s, thing) for s in later) and not new_take:
                return {i}
        if verb == "go" and i + 1 < len(parts) and parts[i + 1][0] == "go" and not parts[i][1]:
            return {i}  # 'go to X' (the place is a 'to' argument) then 'go to Y': X led nowhere
    return set()


def next_step(steps: Sequence[str], taken: Sequence[str], admissible: Sequence[str] = ()) -> str | None:
    """The step a "Next action" line names after the actions `taken`: the first step not yet taken
    (`steps_done`: a step taken out of order counts as taken) that changes something and that the game
    accepts now (`admissible`; when the game gives no list, the first step left); when none left is
    accepted now, the first left. None when every step is taken: the plan is done."""
    done = steps_done(steps, taken)
    left = [s for s, d in zip(steps, done, strict=True) if not d and not changes_nothing(s)]
    if not left:
        return None
    now = {normalize_action(a) for a in admissible}
    return next((s for s in left if normalize_action(s) in now), left[0]) if now else left[0]


def steps_done(steps: Sequence[str], taken: Sequence[str]) -> list[bool]:
    """Which steps the episode has taken and not undone since: each action taken, in order, marks the
    earliest step not yet marked whose action string it is (case and spacing aside), so a step taken
    out of order is marked too and the next step is never one already done (in twc the items may be
    put away in any order). An action that matches no step left but undoes a marked one (a `put O`
    elsewhere after `take O`, a `take O` after `put O`, a `close C` after `open C`) unmarks it: the
    game is back where it was before that step, so the step is to be taken again."""
    same = [normalize_action(s) for s in steps]
    parts = [_parts(s) for s in steps]
    done = [False] * len(steps)
    for action in taken:
        key = normalize_action(action)
        match = next((i for i, step in enumerate(same) if not done[i] and step == key), None)
        if match is not None:
            done[match] = True
            continue
        verb, thing, _ = _parts(action)
        undoes = (
            TAKE_VERBS
            if verb in PUT_VERBS
            else PUT_VERBS
            if verb in TAKE_VERBS
            else {"open"}
            if verb == "close"
            else set()
        )
        undone = [i for i, p in enumerate(parts) if done[i] and p[0] in undoes and p[1] == thing and thing]
        if undone:
            done[undone[-1]] = False
    return done


def warned_actions(kind: str, text: str) -> set[str]:
    """The actions an entry warns against: every quoted action of a mistake; in a skill or plan, the
    quoted actions of a sentence that says do not, never, avoid or stop."""
    if kind == "mistake":
        sentences = [text]
    else:
        sentences = [s for s in re.split(r"(?<=[.;!])\s+", text) if NEGATION.search(s)]
    return {normalize_action(a or b) for s in sentences for a, b in QUOTED.findall(s)}


def prescribed_actions(kind: str, text: str) -> set[str]:
    """The actions an entry prescribes: the steps of its step list ("Steps to try: a -> b", a skill's
    "...: take <object> (2 times) -> put <object> in <place>"), without repeat counts and marks.
    A mistake prescribes nothing."""
    if kind == "mistake" or STEP_ARROW not in text:
        return set()
    first = text.index(STEP_ARROW)
    start = text.rfind(": ", 0, first)
    steps = text[start + 2 if start >= 0 else 0 :].split(STEP_ARROW)
    out = {normalize_action(STEP_NOTE.sub("", s)) for s in steps}
    return {s for s in out if s and not s.startswith("...")}


def key_actions(actions: Sequence[str]) -> str:
    """Actions with blanks and immediate repeats removed, joined by arrows, every one kept (a view too
    small for them shows a prefix and says so: pats.scaffold.render)."""
    kept: list[str] = []
    for a in (a.strip() for a in actions):
        if a and (not kept or kept[-1] != a):
            kept.append(a)
    return " -> ".join(kept)
