"""The benchmarks' statistics: they moved into the package (pats/stats.py, what `pats compare` uses);
this module keeps `from stats import ...` in bench/ working."""

from __future__ import annotations

from pats.stats import (
    DRAWS,
    NAN,
    BySeed,
    Design,
    Difference,
    Interval,
    Outcomes,
    Rate,
    auc,
    crossed_difference,
    crossed_rate,
    detectable_difference,
    hierarchical_difference,
    hierarchical_rate,
    paired_bootstrap,
    paired_games,
    seed_game_difference,
    seed_game_rate,
    shared_games,
    wilson,
)

__all__ = [
    "DRAWS",
    "NAN",
    "BySeed",
    "Design",
    "Difference",
    "Interval",
    "Outcomes",
    "Rate",
    "auc",
    "crossed_difference",
    "crossed_rate",
    "detectable_difference",
    "hierarchical_difference",
    "hierarchical_rate",
    "paired_bootstrap",
    "paired_games",
    "seed_game_difference",
    "seed_game_rate",
    "shared_games",
    "wilson",
]
