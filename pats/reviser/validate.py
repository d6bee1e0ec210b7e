"""Edit-set validation for revisers: the names of the one edit validator, `pats.scaffold.validate`.

The scaffold owns the rules, so the review and the store check an edit set the same way; revisers and
judges import the budgets, the near-duplicate test and the type's entries from here or from there.
"""

from pats.scaffold.validate import (
    MODE_BUDGETS,
    NEAR_DUPLICATE,
    AnyEdit,
    ModeBudget,
    is_near_duplicate,
    normalize,
    similarity,
    type_entries,
    type_scopes,
    validate_edits,
)

__all__ = [
    "MODE_BUDGETS",
    "NEAR_DUPLICATE",
    "AnyEdit",
    "ModeBudget",
    "is_near_duplicate",
    "normalize",
    "similarity",
    "type_entries",
    "type_scopes",
    "validate_edits",
]
