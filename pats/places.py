"""Where pats keeps what it downloads or builds: the cache ($PATS_CACHE) and the data root ($PATS_DATA).

A leaf module (it imports nothing of pats), so that the spec loader, `pats data` and the model files
all read the same two places.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where pats keeps converted models and unpacked games: $PATS_CACHE, else ~/.cache/pats."""
    return Path(os.environ.get("PATS_CACHE") or Path.home() / ".cache" / "pats")


def data_root() -> Path:
    """Where `pats data fetch` puts data and where shipped specs look for it (`${data:...}`):
    $PATS_DATA, else <cache>/data (~/.cache/pats/data). Absolute, so that a relative $PATS_DATA means
    the same folder whichever spec file names it."""
    raw = os.environ.get("PATS_DATA")
    return (Path(raw).expanduser() if raw else cache_dir() / "data").absolute()
