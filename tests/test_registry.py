"""Every kind a spec may name has a builder in its registry (pats.registry), and nothing else does."""

from __future__ import annotations

from typing import get_args

import pytest

import pats.build  # noqa: F401  (registers the judges and revisers)
import pats.engine.run  # noqa: F401  (registers the backends)
import pats.envs  # noqa: F401  (registers the environments)
from pats.errors import PrerequisiteError
from pats.registry import BACKENDS, ENVIRONMENTS, JUDGES, REVISERS
from pats.spec.environments import SECTIONS
from pats.spec.models import JudgeSpec, ReviserSpec, TrainerSpec


def tags(union) -> list[str]:
    """The tags of a spec union: Annotated[A, Tag('a')] | Annotated[B, Tag('b')]."""
    members = get_args(get_args(union)[0])
    return sorted(get_args(m)[1].tag for m in members)


def test_each_spec_kind_has_exactly_one_builder():
    assert JUDGES.names() == tags(JudgeSpec) == ["llm", "stats"]
    assert REVISERS.names() == tags(ReviserSpec) == ["llm", "rules"]
    assert BACKENDS.names() == tags(TrainerSpec) == ["local", "verl"]
    assert set(ENVIRONMENTS.names()) >= set(SECTIONS)


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(PrerequisiteError, match="no judge named 'oracle'; known: llm, stats"):
        JUDGES.get("oracle")
    with pytest.raises(ValueError, match="registered twice"):
        JUDGES.register("stats")(lambda spec: None)
