"""Every kind a spec may name has a builder (pats.registry for environments; plain dicts for the
spec's closed judge, reviser and backend unions), and nothing else does."""

from __future__ import annotations

from typing import get_args

import pytest

import pats.envs  # noqa: F401  (registers the environments)
from pats.build import JUDGE_BUILDERS, REVISER_BUILDERS
from pats.engine.run import TRAINERS
from pats.errors import PrerequisiteError
from pats.registry import ENVIRONMENTS
from pats.spec.environments import SECTIONS
from pats.spec.models import JudgeSpec, ReviserSpec, TrainerSpec


def tags(union) -> list[str]:
    """The tags of a spec union: Annotated[A, Tag('a')] | Annotated[B, Tag('b')]."""
    members = get_args(get_args(union)[0])
    return sorted(get_args(m)[1].tag for m in members)


def test_each_spec_kind_has_exactly_one_builder():
    assert sorted(JUDGE_BUILDERS) == tags(JudgeSpec) == ["llm", "stats"]
    assert sorted(REVISER_BUILDERS) == tags(ReviserSpec) == ["llm", "rules"]
    assert sorted(TRAINERS) == tags(TrainerSpec) == ["local", "verl"]
    assert set(ENVIRONMENTS.names()) >= set(SECTIONS)


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(PrerequisiteError, match="no environment named 'oracle'; known: .*twx"):
        ENVIRONMENTS.get("oracle")
    with pytest.raises(ValueError, match="registered twice"):
        ENVIRONMENTS.register("twx")(lambda section: None)
