"""Intervals that count seeds and games: `pats compare`'s and the benchmarks' statistics, one place for
each rule (bench/ imports them from here).

Outcomes are 0/1 episode results grouped the way they were drawn: a run (seed) plays games (tasks),
each game a few episodes. Episodes of one game are not independent draws, and neither are the games
of one seed (they share a trained policy), so:
- a success rate gets an interval clustered by game (resample games, not episodes) and, when there
  are several seeds, by seed too: `hierarchical_rate`;
- a difference of two conditions gets the hierarchical paired bootstrap: resample seeds, then games
  within each drawn seed, each (seed, game) keeping both conditions' outcomes so the pairing survives:
  `hierarchical_difference`, with the per-seed differences beside it;
- `paired_bootstrap` (games only, seeds held fixed) is the older interval; it leaves out run-to-run
  variance and is kept to show what changed (docs/journal/2026-12-01-intervals-over-seeds.md) and as the tests' reference;
- `wilson` pools episodes as if independent: for single-seed counts where no game grouping exists.

With one seed, the hierarchical bootstrap is the game-clustered one, draw for draw the same as
`paired_bootstrap`.

Two designs. When every seed plays the same games (a crossed design: a sweep's cells evaluated on one
held-out fold), `crossed_difference` / `crossed_rate` draw seeds with replacement and one set of games
with replacement, shared by every drawn seed, so a game that is easy for all seeds moves all of them
together. `hierarchical_*` draws the games independently within each drawn seed (nested): right when
each seed plays its own games; on a crossed design it treats one game's S outcomes as S independent
games and comes out narrower than the games alone justify (tests/test_stats.py shows by how much).
`seed_game_difference` / `seed_game_rate` decide the design on the games actually paired: the seeds
both conditions have (by seed id), within each the games both have; crossed on the games every such
seed has when there are any (a seed's other games are left out, so a seed evaluated on more games
than the others cannot pass for a nested design), else nested on each seed's own games. Their
records say the design and how many games each seed contributed.
Percentile intervals, fixed RNG seed: every table recomputes to the same digits.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Outcomes = Mapping[str, Sequence[float]]  # game id -> its episodes' outcomes
BySeed = Mapping[int, Outcomes]  # seed -> game id -> outcomes

DRAWS = 2000
Design = Literal["nested", "crossed"]  # games drawn within each drawn seed, or once for all seeds


@dataclass(frozen=True)
class Interval:
    """An estimate and its 95% interval."""

    estimate: float
    lo: float
    hi: float

    def fmt(self, signed: bool = False, digits: int = 3) -> str:
        f = f"{{:{'+' if signed else ''}.{digits}f}}".format
        return f"{f(self.estimate)} [{f(self.lo)}, {f(self.hi)}]"


@dataclass(frozen=True)
class Difference:
    """a - b over the seeds and games both have, its hierarchical interval, a - b per seed, how the
    games were resampled (`Design`) and how many games each seed contributed."""

    interval: Interval
    per_seed: tuple[tuple[int, float], ...]
    design: Design = "nested"
    games: tuple[tuple[int, int], ...] = ()  # (seed, games paired)

    def fmt(self, digits: int = 3) -> str:
        seeds = ", ".join(f"s{s} {d:+.{digits}f}" for s, d in self.per_seed)
        return f"{self.interval.fmt(signed=True, digits=digits)}; per seed {seeds}"


@dataclass(frozen=True)
class Rate:
    """A success rate over seeds and games: its interval, the design, and how many games (and
    episodes, all seeds together) each seed contributed."""

    interval: Interval
    design: Design
    games: tuple[tuple[int, int], ...]  # (seed, games)
    episodes: int


NAN = Interval(math.nan, math.nan, math.nan)

# One (seed, game) unit: (sum of a, episodes of a, sum of b, episodes of b); b is (0, 0) for a rate.
_Unit = tuple[float, int, float, int]


def _units(a: BySeed, b: BySeed | None) -> dict[int, list[_Unit]]:
    """seed -> its games' units, over the seeds (and within each, the games) both a and b have."""
    out: dict[int, list[_Unit]] = {}
    for seed in sorted(set(a) & set(b) if b is not None else set(a)):
        games = sorted(set(a[seed]) & set(b[seed]) if b is not None else set(a[seed]))
        units = [
            (float(sum(a[seed][g])), len(a[seed][g]), *((float(sum(b[seed][g])), len(b[seed][g])) if b is not None else (0.0, 0)))
            for g in games
        ]  # fmt: skip
        if units:
            out[seed] = units
    return out


def _stat(units: Sequence[_Unit]) -> float:
    sa, na, sb, nb = (sum(u[i] for u in units) for i in range(4))
    return sa / na - (sb / nb if nb else 0.0)


def _percentiles(stats: list[float]) -> tuple[float, float]:
    stats = sorted(stats)
    return stats[int(0.025 * len(stats))], stats[int(0.975 * len(stats)) - 1]


def _hierarchical(by_seed: dict[int, list[_Unit]], draws: int, rng_seed: int) -> Interval:
    if not by_seed:
        return NAN
    seeds = list(by_seed)
    rng = random.Random(rng_seed)
    stats = []
    for _ in range(draws):
        sample: list[_Unit] = []
        for i in range(len(seeds)):  # seeds with replacement, then each drawn seed's games with replacement
            units = by_seed[seeds[rng.randrange(len(seeds)) if len(seeds) > 1 else i]]
            sample += [units[rng.randrange(len(units))] for _ in units]
        stats.append(_stat(sample))
    lo, hi = _percentiles(stats)
    return Interval(_stat([u for units in by_seed.values() for u in units]), lo, hi)


def hierarchical_rate(outcomes: BySeed, draws: int = DRAWS, rng_seed: int = 0) -> Interval:
    """Success rate (episodes pooled) with its 95% interval over seeds and games; with one seed,
    the interval clustered by game. At 0 or 1 the bootstrap has nothing to resample (zero width), so
    the interval is Wilson's over the (seed, game) units, each counted once: the clustered end."""
    units = _units(outcomes, None)
    r = _hierarchical(units, draws, rng_seed)
    n = sum(len(u) for u in units.values())
    if r.estimate in (0.0, 1.0):
        return Interval(r.estimate, *wilson(round(r.estimate * n), n))
    return r


def hierarchical_difference(a: BySeed, b: BySeed, draws: int = DRAWS, rng_seed: int = 0) -> Difference:
    """mean(a) - mean(b), paired by seed and game, with its 95% hierarchical bootstrap interval."""
    units = _units(a, b)
    per_seed = tuple((s, _stat(u)) for s, u in units.items())
    games = tuple((s, len(u)) for s, u in units.items())
    return Difference(_hierarchical(units, draws, rng_seed), per_seed, "nested", games)


def shared_games(*conditions: BySeed) -> bool:
    """Whether every seed of every condition plays the same games: the crossed design."""
    sets = {frozenset(games) for by_seed in conditions for games in by_seed.values()}
    return len(sets) == 1


def _crossed_units(a: BySeed, b: BySeed | None) -> dict[int, list[_Unit]]:
    """`_units` restricted to the games every seed (of both conditions) has, so the i-th unit of each
    seed is the same game."""
    units = _units(a, b)
    if not units:
        return units
    common = set.intersection(*(set(a[s]) & (set(b[s]) if b is not None else set(a[s])) for s in units))
    return _units({s: {g: a[s][g] for g in common} for s in units}, None if b is None else {s: {g: b[s][g] for g in common} for s in units})  # fmt: skip


def _crossed(by_seed: dict[int, list[_Unit]], draws: int, rng_seed: int) -> Interval:
    """Seeds with replacement and one draw of games with replacement, the same games for every drawn
    seed. With one seed, draw for draw the game bootstrap of `_hierarchical`."""
    if not by_seed or not all(by_seed.values()):
        return NAN
    seeds = list(by_seed)
    games = len(by_seed[seeds[0]])
    rng = random.Random(rng_seed)
    stats = []
    for _ in range(draws):
        drawn = [seeds[rng.randrange(len(seeds))] for _ in seeds] if len(seeds) > 1 else seeds
        picked = [rng.randrange(games) for _ in range(games)]
        stats.append(_stat([by_seed[s][g] for s in drawn for g in picked]))
    lo, hi = _percentiles(stats)
    return Interval(_stat([u for units in by_seed.values() for u in units]), lo, hi)


def crossed_rate(outcomes: BySeed, draws: int = DRAWS, rng_seed: int = 0) -> Interval:
    """`hierarchical_rate` for seeds that play the same games: the games drawn once for all seeds
    (only the games every seed has count). At 0 or 1, Wilson's interval over the games."""
    units = _crossed_units(outcomes, None)
    r = _crossed(units, draws, rng_seed)
    n = len(next(iter(units.values()), []))
    if r.estimate in (0.0, 1.0):
        return Interval(r.estimate, *wilson(round(r.estimate * n), n))
    return r


def crossed_difference(a: BySeed, b: BySeed, draws: int = DRAWS, rng_seed: int = 0) -> Difference:
    """mean(a) - mean(b), paired by seed and game, over the games every seed of both has, with the
    crossed bootstrap's 95% interval."""
    units = _crossed_units(a, b)
    per_seed = tuple((s, _stat(u)) for s, u in units.items())
    games = tuple((s, len(u)) for s, u in units.items())
    return Difference(_crossed(units, draws, rng_seed), per_seed, "crossed", games)


def paired_games(a: BySeed, b: BySeed | None = None) -> tuple[dict[int, frozenset[str]], Design]:
    """The games an interval rests on, per seed, and its design, decided on the games actually paired:
    the seeds both have (by seed id; all of a's for a rate), within each the games both have; crossed
    on the games every such seed has when there are any, else nested on each seed's own games."""
    seeds = sorted(set(a) & set(b) if b is not None else set(a))
    played = {s: frozenset(a[s]) & frozenset(b[s]) if b is not None else frozenset(a[s]) for s in seeds}
    played = {s: g for s, g in played.items() if g}
    common = frozenset.intersection(*played.values()) if played else frozenset()
    if common:
        return {s: common for s in played}, "crossed"
    return played, "nested"


def _only(outcomes: BySeed, games: Mapping[int, frozenset[str]]) -> dict[int, dict[str, Sequence[float]]]:
    return {s: {g: outcomes[s][g] for g in kept} for s, kept in games.items()}


def seed_game_rate(outcomes: BySeed, draws: int = DRAWS, rng_seed: int = 0) -> Rate:
    """The rate's interval in the design its seeds allow (`paired_games`): crossed on the games every
    seed played, when there are any."""
    games, design = paired_games(outcomes)
    kept = _only(outcomes, games)
    rate = crossed_rate if design == "crossed" else hierarchical_rate
    episodes = sum(len(v) for by_game in kept.values() for v in by_game.values())
    return Rate(rate(kept, draws, rng_seed), design, tuple((s, len(g)) for s, g in games.items()), episodes)


def seed_game_difference(a: BySeed, b: BySeed, draws: int = DRAWS, rng_seed: int = 0) -> Difference:
    """a - b in the design the runs allow (`paired_games`): crossed on the games every seed of both
    played, when there are any, else nested (`Difference.design` says which)."""
    games, design = paired_games(a, b)
    difference = crossed_difference if design == "crossed" else hierarchical_difference
    return difference(_only(a, games), _only(b, games), draws, rng_seed)


def paired_bootstrap(
    a: Outcomes, b: Outcomes, draws: int = DRAWS, seed: int = 0
) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its 95% interval resampling games only (each game keeps all its seeds'
    outcomes in both conditions): seeds are held fixed, so run-to-run variance is left out."""
    tasks = sorted(set(a) & set(b))
    if not tasks:
        return (math.nan, math.nan, math.nan)
    units = [(float(sum(a[t])), len(a[t]), float(sum(b[t])), len(b[t])) for t in tasks]
    rng = random.Random(seed)
    stats = [_stat([units[rng.randrange(len(units))] for _ in units]) for _ in range(draws)]
    return (_stat(units), *_percentiles(stats))


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion of independent episodes (sound at 0/n and n/n)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


def auc(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Trapezoid area under (xs, ys) divided by the x range: the mean success over training."""
    if len(xs) < 2:
        return ys[0] if ys else float("nan")
    area = sum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2 for i in range(len(xs) - 1))
    return area / (xs[-1] - xs[0])


def detectable_difference(p: float, n: int) -> float:
    """Smallest difference of two proportions near p, n episodes each, that a two-sided test at 5%
    finds with 80% power (unpaired, so pairing makes the real design somewhat more sensitive)."""
    p = min(max(p, 0.02), 0.98)
    return (1.96 + 0.84) * math.sqrt(2 * p * (1 - p) / n)
