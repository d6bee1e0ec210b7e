"""The reviser benchmark's bundles: the records, their recording and the committed bundles live in the
package (`pats.reviser.bundles`; the bundles ship as its data, `SHIPPED`)."""

from __future__ import annotations

from pats.reviser.bundles import SHIPPED as BUNDLES
from pats.reviser.bundles import ReviserBundle, load, record, save

__all__ = ["BUNDLES", "ReviserBundle", "load", "record", "save"]
