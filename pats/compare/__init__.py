"""`pats compare`: runs grouped by condition (runs.py), the table with intervals (table.py), files (output.py)."""

from pats.compare.records import BaselineDifference, Comparison, ConditionRow
from pats.compare.runs import RunRecord, read_run, run_dirs, unread_cells
from pats.compare.table import compare

__all__ = [
    "BaselineDifference",
    "Comparison",
    "ConditionRow",
    "RunRecord",
    "compare",
    "read_run",
    "run_dirs",
    "unread_cells",
]
