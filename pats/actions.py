"""The action grammar the text games share: how two actions count as the same, and an action's parts.

A leaf module (it imports nothing of pats): the cards, the reviser's abstraction and the scaffold's
plans all read actions through it, so none of them imports another to compare two actions.
"""

from __future__ import annotations

# The role of an argument by the word that introduces it; the first argument has no preposition.
ROLES = {"": "<object>", "in": "<place>", "on": "<place>", "in/on": "<place>", "into": "<place>",
         "from": "<place>", "to": "<place>", "with": "<tool>"}  # fmt: skip
PREPOSITIONS = tuple(k for k in ROLES if k)


def normalize_action(action: str) -> str:
    """The form in which two actions count as the same: lower case, single spaces."""
    return " ".join(action.lower().split())


def split_action(action: str) -> tuple[str, list[tuple[str, str]]]:
    """('put', [('', 'black pepper'), ('in', 'shelf')]) for 'put black pepper in shelf'.
    'go to X' keeps 'go' as the verb and X as a 'to' argument; meta actions have no arguments."""
    words = action.strip().split()
    if not words:
        return "", []
    verb, rest = words[0].lower(), words[1:]
    args: list[tuple[str, list[str]]] = [("", [])]
    for w in rest:
        if w.lower() in PREPOSITIONS and args[-1][1]:  # a preposition after some argument words
            args.append((w.lower(), []))
        elif w.lower() in PREPOSITIONS and not args[-1][1] and args[-1][0] == "":
            args[-1] = (w.lower(), [])  # 'go to X', 'look around' has no preposition
        else:
            args[-1][1].append(w)
    return verb, [(prep, " ".join(ws)) for prep, ws in args if ws]
