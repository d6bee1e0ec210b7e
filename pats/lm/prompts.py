"""Prompt and rubric files (data under judges/), and records written the way a prompt shows them.

Shared by the LLM judge and reviser: `render_cards`, `render_entries` and `render_assessment` are the
text the model reads, so a change here changes every prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from pats.errors import PrerequisiteError, SpecError, SpecIssue
from pats.types import Assessment, EvidenceCard, ScaffoldEntry

M = TypeVar("M", bound=BaseModel)
# pats' own rubrics and reviser prompt, data edited in the checkout's judges/ folder: an installed wheel
# carries a copy as pats/judges_data/ (setup.py's build step), an editable install reads the checkout's.
PACKAGED_PROMPTS = Path(__file__).resolve().parents[1] / "judges_data"
CHECKOUT_PROMPTS = Path(__file__).resolve().parents[2] / "judges"


def own_prompt(name: str) -> Path:
    """pats' own `judges/<name>` (a rubric `<environment kind>.yaml`, or `reviser.yaml`): the copy an
    installed wheel ships, else the checkout's file."""
    folder = PACKAGED_PROMPTS if PACKAGED_PROMPTS.is_dir() else CHECKOUT_PROMPTS
    found = folder / name
    if not found.is_file():
        known = sorted(p.name for p in folder.glob("*.yaml"))
        raise PrerequisiteError(
            f"pats has no prompt file judges/{name} ({folder} holds {', '.join(known) or 'nothing'}): for "
            "an environment without a rubric of pats', set the spec's judge.rubric to a rubric of your own "
            "(`pats validate` checks it); if pats' own files are missing, reinstall pats from a full clone"
        )
    return found


def prompt_file(path: str | None, default_name: str) -> Path:
    """`path` (relative to the working directory) if given, else pats' own `judges/<default_name>`."""
    if not path:
        return own_prompt(default_name)
    if not Path(path).is_file():
        raise PrerequisiteError(f"prompt file {path} not found; fix the path in the spec")
    return Path(path)


def read_prompt_file(path: Path, model: type[M]) -> M:
    """A YAML prompt or rubric file validated into `model`; every problem reported at once."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid YAML: {exc}", file=str(path)) from None
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        issues = [SpecIssue(".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors()]
        raise SpecError(issues, file=str(path)) from None


# -- rendering records for prompts (shared by the LLM judge and reviser) ------------------------------


def render_cards(cards: Sequence[EvidenceCard], names: Sequence[str] | None = None) -> str:
    """The cards as a prompt shows them, each headed by its id, or by its name in `names` (the
    reviser's short aliases C1..Cn) when given."""
    if not cards:
        return "(no cards)"
    heads = list(names) if names is not None else [c.id for c in cards]
    blocks = []
    for head, card in zip(heads, cards, strict=True):
        tag = ", privileged: built from the expert plan" if card.privileged else ""
        blocks.append(f"[{head}] {card.type} card, task {card.task_id}{tag}\n{card.text.strip()}")
    return "\n\n".join(blocks)


def render_entries(entries: Sequence[ScaffoldEntry]) -> str:
    if not entries:
        return "(no entries)"
    return "\n".join(f"[{e.id}] {e.kind}, scope {e.scope}: {e.text.strip()}" for e in entries)


def render_assessment(assessment: Assessment) -> str:
    utility = "not measured" if assessment.utility is None else f"{assessment.utility:+.2f}"
    withdrawn = [f"{s.scope} ({s.success:.2f})" for s in assessment.scopes if s.withdraw]
    return (
        f"review mode {assessment.mode.value}; success moving average {assessment.ema_success:.2f}; "
        f"scaffold budget pressure {assessment.pressure:.2f}; utility (success with the scaffold minus "
        f"without) {utility}"
        + ("" if assessment.removal_open else "; warm-up: delete nothing unless over budget")
        + (
            f"; solved, so withdraw their entries and add none there: {', '.join(withdrawn)}"
            if withdrawn
            else ""
        )
    )
