"""The reviser benchmark's bundles: the records and their recording live in the package
(`pats.reviser.bundles`, which `pats compile-reviser` reads too); the committed bundles are here."""

from __future__ import annotations

from pathlib import Path

from pats.reviser.bundles import ReviserBundle, load, record, save

BUNDLES = Path(__file__).resolve().parent / "reviser_bundles"

__all__ = ["BUNDLES", "ReviserBundle", "load", "record", "save"]
