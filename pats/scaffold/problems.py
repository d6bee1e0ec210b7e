"""The validator's problems read back: which rule wrote a problem, and which edits it names.

`pats.scaffold.validate` writes each problem as text for the LLM reviser's feedback, naming the edits
by index ("edit 2 (ADD skill type:twc): ...", "edits 0, 1: ...") or the set as a whole ("edit set
(COMPRESS): ..."). The reviser's metric and benchmark count by rule; this table maps a message to its
rule, next to the one place the messages are written, and a test keeps every message covered.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# The validator's messages, by the rule that wrote them: the first pattern a problem matches names it.
RULES: tuple[tuple[str, str], ...] = (
    ("unknown_card", "cites unknown card"),
    ("too_few_citations", r"distinct card\(s\); cite at least"),
    ("prune_only_deletes", "PRUNE only deletes"),
    ("compress_add_alone", "COMPRESS adds only beside"),
    ("compress_not_smaller", "COMPRESS must lower the total"),
    ("compress_removal_off", r"edit set \(COMPRESS\): removal is off"),
    ("mode_add_budget", r"ADDs; \w+ accepts at most"),
    ("removal_off", "removal is off"),
    ("mode_no_delete", "does not delete"),
    ("scope_outside_type", "is not one of this type's"),
    ("bad_scope", "is not 'general', 'type:"),
    ("plan_not_task_scoped", "a plan belongs to one task"),
    ("unknown_entry", "no entry '"),
    ("entry_outside_type", "not this type's; edit only entries"),
    ("entry_edited_twice", "is already edited by edit"),
    ("empty_text", "text is empty"),
    ("near_duplicate", "near-duplicate"),
    ("task_plans_off", "task_plans is false"),
    ("grow_add_only", "mode grow only adds"),
    ("not_an_edit", "is not an ADD, UPDATE or DELETE"),
)
CITATION_RULES = frozenset({"unknown_card", "too_few_citations"})
EDIT_INDEX = re.compile(r"^edits? ([\d, ]+)")


def rule_of(problem: str) -> str:
    return next((name for name, pattern in RULES if re.search(pattern, problem)), "other")


def named_edits(problem: str) -> set[int]:
    """The indices of the edits a problem names ('edit 2 (...)', 'edits 0, 1: ...'); none for a set's."""
    m = EDIT_INDEX.match(problem)
    return {int(i) for i in m.group(1).replace(",", " ").split()} if m else set()


def valid_indices(edits: Sequence[object], problems: Sequence[str]) -> list[int]:
    """The indices of the edits no problem names; none when a problem is about the whole set."""
    if any(not named_edits(p) for p in problems):
        return []
    named = set().union(*(named_edits(p) for p in problems))
    return [i for i in range(len(edits)) if i not in named]
