"""Scoring one reviser answer on one bundle: it moved into the package (`pats.reviser.score`, which
`pats reviser bench` and `pats compile-reviser` share)."""

from __future__ import annotations

from pats.reviser.score import BundleScore, bundle_check, kinds_fields, score

__all__ = ["BundleScore", "bundle_check", "kinds_fields", "score"]
