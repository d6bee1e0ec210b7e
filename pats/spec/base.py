"""Shared base for spec models: forbid unknown keys, freeze after validation."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def tag_or_default(key: str, default: str | None):
    """Discriminator for a union whose tag may be left out of the YAML.

    `trainer: {steps: 5}` then means the default backend instead of an error asking for one.
    """

    def get(value):
        if isinstance(value, dict):
            return value.get(key, default)
        return getattr(value, key, default)

    return get
