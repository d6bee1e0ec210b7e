"""Experiment specs: Pydantic models (the one source of defaults) and the one-way YAML loader."""

from pats.spec.loader import load_spec, spec_to_yaml
from pats.spec.models import ExperimentSpec

__all__ = ["ExperimentSpec", "load_spec", "spec_to_yaml"]
