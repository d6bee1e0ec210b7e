"""The training scaffold: the versioned store, its one edit validator, its rendering into prompts, and
initial banks."""

from pats.scaffold.bank import load_bank
from pats.scaffold.render import place, render_markdown, render_view, with_scaffold
from pats.scaffold.store import EditError, ScaffoldStore, content_hash

__all__ = [
    "EditError",
    "ScaffoldStore",
    "content_hash",
    "load_bank",
    "place",
    "render_markdown",
    "render_view",
    "with_scaffold",
]
