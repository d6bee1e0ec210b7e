"""pats/stats.py (what `pats compare` and bench/ use): intervals that count seeds and games,
checked on hand-built outcomes; the crossed design against the nested one and the games alone."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from pats import stats


def games(rates: list[float], episodes: int = 2) -> dict[str, list[float]]:
    """Game g{i} with `episodes` outcomes whose mean is rates[i] (rates in steps of 1/episodes)."""
    out = {}
    for i, r in enumerate(rates):
        wins = round(r * episodes)
        out[f"g{i}"] = [1.0] * wins + [0.0] * (episodes - wins)
    return out


def test_wilson_matches_hand_computed_intervals():
    # 0/10: center = half = (1.96^2 / 20) / (1 + 1.96^2 / 10) = 0.13877 -> [0, 0.2775]
    lo, hi = stats.wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = stats.wilson(5, 10)  # symmetric around 0.5
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    lo, hi = stats.wilson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)
    assert stats.wilson(0, 0) == (0.0, 1.0)


def test_auc_is_the_trapezoid_mean_over_steps():
    # area 10 * 0.1 + 10 * 0.2 = 3 over 20 steps
    assert stats.auc([0, 10, 20], [0.0, 0.2, 0.2]) == pytest.approx(0.15)
    assert stats.auc([0, 5, 20], [0.5, 0.5, 0.5]) == pytest.approx(0.5)
    assert stats.auc([3], [0.25]) == 0.25


def test_paired_bootstrap_keeps_tasks_paired():
    same = {"t1": [1.0], "t2": [0.0]}
    assert stats.paired_bootstrap(same, same) == (0.0, 0.0, 0.0)
    ones = {f"t{i}": [1.0, 1.0] for i in range(20)}
    zeros = {f"t{i}": [0.0, 0.0] for i in range(20)}
    assert stats.paired_bootstrap(ones, zeros) == (1.0, 1.0, 1.0)
    a = {f"t{i}": [float(i < 8)] for i in range(40)}  # 8/40 against 2/40 on the same tasks
    b = {f"t{i}": [float(i < 2)] for i in range(40)}
    diff, lo, hi = stats.paired_bootstrap(a, b)
    assert diff == pytest.approx(0.15) and 0.0 < lo < 0.15 < hi < 0.35
    assert math.isnan(stats.paired_bootstrap({"x": [1.0]}, {"y": [0.0]})[0])  # nothing paired


def test_detectable_difference_shrinks_with_episodes():
    # (1.96 + 0.84) * sqrt(2 * 0.12 * 0.88 / 128) = 0.1137
    assert stats.detectable_difference(0.12, 128) == pytest.approx(0.1137, abs=1e-3)
    assert stats.detectable_difference(0.12, 768) < stats.detectable_difference(0.12, 128) / 2


def test_seed_to_seed_variance_widens_the_interval_the_game_only_bootstrap_misses():
    # Seeds 0 and 2 beat b by 0.5 on every game, seeds 1 and 3 tie: pooled over seeds, every game
    # shows +0.25, so resampling games alone sees no variance at all.
    n = 16
    b = {s: games([0.0] * n) for s in range(4)}
    a = {s: games([0.5 if s % 2 == 0 else 0.0] * n) for s in range(4)}
    pooled = lambda by_seed: {g: [x for s in sorted(by_seed) for x in by_seed[s][g]] for g in by_seed[0]}  # noqa: E731
    d, lo, hi = stats.paired_bootstrap(pooled(a), pooled(b))
    assert (d, lo, hi) == (0.25, 0.25, 0.25)
    h = stats.hierarchical_difference(a, b)
    assert h.interval.estimate == pytest.approx(0.25)
    # Seed draws: the share of "winning" seeds among 4 draws is 0..4 of 4; 2.5% and 97.5% land on
    # 1/4 and 3/4 of them (P(0 of 4) = 1/16 > 2.5%, so the tails reach 0.0 and 0.5).
    assert h.interval.lo == pytest.approx(0.0) and h.interval.hi == pytest.approx(0.5)
    assert h.per_seed == ((0, 0.5), (1, 0.0), (2, 0.5), (3, 0.0))


def test_a_rate_is_clustered_by_game_not_by_episode():
    # 10 games x 8 episodes, each game always won or always lost: 80 episodes but 10 independent draws.
    outcomes = {0: games([1.0] * 5 + [0.0] * 5, episodes=8)}
    r = stats.hierarchical_rate(outcomes)
    lo, hi = stats.wilson(40, 80)
    assert r.estimate == 0.5
    assert r.hi - r.lo > 1.8 * (hi - lo)  # Wilson ~0.22 wide, the game bootstrap ~0.6
    # Every game 1 of 2: no game-to-game variance, so the interval has no width.
    assert stats.hierarchical_rate({0: games([0.5] * 10)}) == stats.Interval(0.5, 0.5, 0.5)


def test_one_seed_is_the_game_bootstrap_and_the_rng_is_fixed():
    a = {0: games([1.0] * 8 + [0.0] * 32, episodes=1)}
    b = {0: games([1.0] * 2 + [0.0] * 38, episodes=1)}
    h = stats.hierarchical_difference(a, b)
    d, lo, hi = stats.paired_bootstrap(a[0], b[0])
    assert (h.interval.estimate, h.interval.lo, h.interval.hi) == (d, lo, hi)
    assert d == pytest.approx(0.15) and 0.0 < lo < 0.15 < hi < 0.35
    assert stats.hierarchical_difference(a, b) == h  # same draws every time
    assert h.fmt().startswith("+0.150 [") and h.fmt().endswith("; per seed s0 +0.150")


def test_only_seeds_and_games_both_conditions_have_are_paired():
    a = {0: {"x": [1.0], "y": [1.0]}, 1: {"x": [1.0]}, 5: {"x": [1.0]}}
    b = {0: {"x": [0.0], "z": [1.0]}, 1: {"x": [1.0]}}
    h = stats.hierarchical_difference(a, b)
    assert h.per_seed == ((0, 1.0), (1, 0.0))
    assert h.interval.estimate == pytest.approx(0.5)
    assert math.isnan(stats.hierarchical_difference(a, {9: {"x": [0.0]}}).interval.estimate)


def test_a_rate_of_0_or_1_gets_wilson_over_games_not_a_zero_width_interval():
    r = stats.hierarchical_rate({0: games([0.0] * 16, episodes=4), 1: games([0.0] * 4, episodes=4)})
    assert r == stats.Interval(0.0, *stats.wilson(0, 20))  # 20 (seed, game) units, not 80 episodes
    assert stats.hierarchical_rate({0: games([1.0] * 5)}) == stats.Interval(1.0, *stats.wilson(5, 5))


def spread(rng_seed: int, seeds: int, n: int) -> dict[int, dict[str, list[float]]]:
    """`seeds` x `n` games of two outcomes each, drawn from [0, 1): every resample gives another value,
    so an interval moves with any change to the draws (their number, the RNG seed, the percentiles)."""
    rng = random.Random(rng_seed)
    return {
        s: {f"g{i}": [round(rng.random(), 3), round(rng.random(), 3)] for i in range(n)} for s in range(seeds)
    }


def test_the_intervals_recompute_to_the_same_digits():
    # Pinned: the 2000 draws of RNG seed 0 and the 2.5%/97.5% percentiles (the tables of docs/journal/).
    a, b = spread(1, 3, 12), spread(2, 3, 12)
    h = stats.hierarchical_difference(a, b).interval
    assert (h.estimate, h.lo, h.hi) == pytest.approx((-0.0871944444, -0.1945555556, 0.0261111111), abs=1e-9)
    r = stats.hierarchical_rate(a)
    assert (r.estimate, r.lo, r.hi) == pytest.approx((0.4809861111, 0.4024027778, 0.5568194444), abs=1e-9)
    p = stats.paired_bootstrap(a[0], b[0])
    assert p == pytest.approx((-0.0184583333, -0.196875, 0.157875), abs=1e-9)
    # two seeds: both drawn with replacement, each drawn seed's games added to the sample
    two = stats.hierarchical_difference({s: a[s] for s in (0, 1)}, {s: b[s] for s in (0, 1)}).interval
    assert (two.estimate, two.lo, two.hi) == pytest.approx((-0.0855, -0.2304583333, 0.0616458333), abs=1e-9)
    assert stats._percentiles([float(i) for i in range(2000)]) == (50.0, 1949.0)


def test_intervals_print_with_three_digits_and_a_sign_where_asked():
    i = stats.Interval(0.5, 0.25, 0.75)
    assert i.fmt() == "0.500 [0.250, 0.750]"
    assert i.fmt(signed=True, digits=2) == "+0.50 [+0.25, +0.75]"
    d = stats.Difference(stats.Interval(0.1, -0.05, 0.2), ((0, 0.2), (1, 0.0)))
    assert d.fmt() == "+0.100 [-0.050, +0.200]; per seed s0 +0.200, s1 +0.000"
    for record in (i, d):  # records in tables: never changed after the fact
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.estimate = 0.0  # type: ignore[misc]


def test_wilson_stays_within_0_and_1_where_its_formula_rounds_past_them():
    # Unclamped, 5/5 gives an upper end of 1 + 2e-16 and 0/5 a lower end of -3e-17.
    assert stats.wilson(5, 5)[1] == 1.0 and stats.wilson(0, 5)[0] == 0.0


def test_auc_of_two_points_and_of_none():
    assert stats.auc([10, 20], [0.0, 1.0]) == pytest.approx(0.5)  # over the range 10..20, not 0..30
    assert math.isnan(stats.auc([], []))


def test_detectable_difference_clamps_p_to_0_02_and_0_98():
    assert stats.detectable_difference(0.999, 100) == stats.detectable_difference(0.98, 100)
    assert stats.detectable_difference(0.0, 100) == stats.detectable_difference(0.02, 100)


def identical_seeds(seeds: int, n: int, rng_seed: int) -> dict[int, dict[str, list[float]]]:
    """`seeds` copies of one seed's outcomes on `n` games (4 episodes each, win rate drawn per game)."""
    rng = random.Random(rng_seed)
    one = {
        f"g{i}": [float(rng.random() < p) for _ in range(4)]
        for i, p in enumerate(rng.random() for _ in range(n))
    }
    return {s: one for s in range(seeds)}


def test_crossed_with_identical_seeds_is_the_bootstrap_over_games_alone():
    # Identical seeds carry no seed-to-seed variance: the crossed interval must be the one of a
    # bootstrap over the games alone (up to Monte Carlo error: other draws of the same distribution).
    # The nested one draws each seed's games apart, counts the 4 copies of a game as 4 games and comes
    # out about 1/sqrt(4) as wide.
    a, b = identical_seeds(4, 40, rng_seed=3), identical_seeds(4, 40, rng_seed=4)
    d, lo, hi = stats.paired_bootstrap(a[0], b[0], draws=4000)
    crossed = stats.crossed_difference(a, b, draws=4000).interval
    assert crossed.estimate == pytest.approx(d)
    assert crossed.lo == pytest.approx(lo, abs=0.03) and crossed.hi == pytest.approx(hi, abs=0.03)
    nested = stats.hierarchical_difference(a, b, draws=4000).interval
    assert nested.hi - nested.lo < 0.65 * (hi - lo)
    rate = stats.crossed_rate(a, draws=4000)
    alone = stats.hierarchical_rate({0: a[0]}, draws=4000)
    assert rate.lo == pytest.approx(alone.lo, abs=0.03) and rate.hi == pytest.approx(alone.hi, abs=0.03)


def test_seeds_that_disagree_widen_the_crossed_interval():
    # 24 games, 4 episodes each, win rates 1/4, 2/4 or 3/4. Agreeing: every seed has those rates.
    # Disagreeing: seeds 0 and 2 win one episode more of every game, seeds 1 and 3 one fewer. Pooled
    # over seeds every game is the same in both, so a bootstrap over games alone sees no difference.
    rates = [(1 + i % 3) / 4 for i in range(24)]
    agree = {s: games(rates, episodes=4) for s in range(4)}
    disagree = {s: games([r + (0.25 if s % 2 == 0 else -0.25) for r in rates], episodes=4) for s in range(4)}
    b = {s: games([0.0] * 24, episodes=4) for s in range(4)}
    pooled = lambda by_seed: {g: [x for s in sorted(by_seed) for x in by_seed[s][g]] for g in by_seed[0]}  # noqa: E731
    assert stats.paired_bootstrap(pooled(agree), pooled(b)) == stats.paired_bootstrap(
        pooled(disagree), pooled(b)
    )
    same = stats.crossed_difference(agree, b).interval
    wide = stats.crossed_difference(disagree, b).interval
    assert same.estimate == wide.estimate == pytest.approx(0.5)
    assert (wide.hi - wide.lo) > 1.5 * (same.hi - same.lo)


def test_crossed_and_nested_against_a_hand_computed_distribution():
    # Two seeds, two games, one episode each; differences a - b: seed 0 (g0 1, g1 0), seed 1 (1, 1).
    a = {0: {"g0": [1.0], "g1": [0.0]}, 1: {"g0": [1.0], "g1": [1.0]}}
    b = {0: {"g0": [0.0], "g1": [0.0]}, 1: {"g0": [0.0], "g1": [0.0]}}
    # Crossed: 4 seed draws x 4 game draws, equally likely. Seeds (0, 0) give 1, .5, .5, 0; (1, 1) give
    # 1 four times; (0, 1) and (1, 0) give 1, .75, .75, .5. So P(0) = 1/16 > 2.5% and P(1) = 7/16:
    # the interval is [0, 1] around the estimate 3/4.
    c = stats.crossed_difference(a, b)
    assert (c.interval.estimate, c.interval.lo, c.interval.hi) == (0.75, 0.0, 1.0)
    assert c.design == "crossed" and c.per_seed == ((0, 0.5), (1, 1.0))
    # Nested: 0 needs seeds (0, 0) and g1 in all four game draws, 1/4 * 1/16 = 1/64 < 2.5%; 0.25 needs
    # (0, 0) and one g0 in four, 1/4 * 4/16: P(<= .25) = 5/64 > 2.5%, so the lower end is 0.25.
    n = stats.hierarchical_difference(a, b)
    assert (n.interval.lo, n.interval.hi) == (0.25, 1.0) and n.design == "nested"
    # seed_game_difference picks crossed here (both seeds play g0 and g1), nested when no game is
    # played by every seed.
    assert stats.seed_game_difference(a, b) == c
    a2 = {0: a[0], 1: {"g2": [1.0], "g3": [1.0]}}
    b2 = {0: b[0], 1: {"g2": [0.0], "g3": [0.0]}}
    assert stats.seed_game_difference(a2, b2) == stats.hierarchical_difference(a2, b2)
    assert not stats.shared_games(a2) and stats.shared_games(a, b)


def test_the_design_is_decided_on_the_games_paired_not_on_each_seeds_whole_set():
    # Seed 0 also played g2 and g3 (a larger evaluation of that seed's cell only), and b's seed 1
    # played g4: the games every seed of both played are g0 and g1, so crossed on those two.
    a = {0: {"g0": [1.0], "g1": [0.0], "g2": [1.0], "g3": [1.0]}, 1: {"g0": [1.0], "g1": [1.0]}}
    b = {0: {"g0": [0.0], "g1": [0.0]}, 1: {"g0": [0.0], "g1": [0.0], "g4": [1.0]}, 2: {"g0": [1.0]}}
    two = {s: {g: a[s][g] for g in ("g0", "g1")} for s in (0, 1)}
    d = stats.seed_game_difference(a, b)
    assert d == stats.crossed_difference(two, {s: b[s] for s in (0, 1)})
    assert (d.design, d.games, d.per_seed) == ("crossed", ((0, 2), (1, 2)), ((0, 0.5), (1, 1.0)))
    r = stats.seed_game_rate(a)
    assert r == stats.Rate(stats.crossed_rate(two), "crossed", ((0, 2), (1, 2)), 4)
    assert stats.paired_games(a, b) == ({0: frozenset({"g0", "g1"}), 1: frozenset({"g0", "g1"})}, "crossed")
    # seeds on games of their own: nested on each seed's own games, all of them
    own = {0: {"g0": [1.0], "g1": [0.0], "g2": [1.0]}, 1: {"h0": [1.0]}}
    r = stats.seed_game_rate(own)
    assert (r.interval, r.design, r.games) == (stats.hierarchical_rate(own), "nested", ((0, 3), (1, 1)))


def test_crossed_keeps_only_the_games_every_seed_has_and_one_seed_is_the_game_bootstrap():
    a = {0: {"x": [1.0], "y": [0.0], "z": [1.0]}, 1: {"x": [1.0], "y": [1.0]}}
    b = {0: {"x": [0.0], "y": [0.0], "z": [0.0]}, 1: {"x": [0.0], "y": [0.0]}}
    c = stats.crossed_difference(a, b)
    assert c.per_seed == ((0, 0.5), (1, 1.0))  # z, which seed 1 did not play, is left out
    one_a, one_b = {0: spread(7, 1, 20)[0]}, {0: spread(8, 1, 20)[0]}
    crossed, nested = stats.crossed_difference(one_a, one_b), stats.hierarchical_difference(one_a, one_b)
    assert crossed.interval == nested.interval  # draw for draw
    assert math.isnan(stats.crossed_difference(a, {9: {"x": [0.0]}}).interval.estimate)
    rate = stats.seed_game_rate({0: {"x": [0.0, 0.0]}, 1: {"x": [0.0]}})
    one_game = stats.Interval(0.0, *stats.wilson(0, 1))  # one game: Wilson of 0/1
    assert rate == stats.Rate(one_game, "crossed", ((0, 1), (1, 1)), 3)


def test_the_crossed_and_chosen_designs_draw_with_rng_seed_0_and_pair_only_shared_games():
    # the digits a comparison reports are those of RNG seed 0, like hierarchical_*'s
    a, b = spread(1, 3, 12), spread(2, 3, 12)
    assert stats.crossed_rate(a) == stats.crossed_rate(a, rng_seed=0) != stats.crossed_rate(a, rng_seed=1)
    assert (
        stats.seed_game_rate(a) == stats.seed_game_rate(a, rng_seed=0) != stats.seed_game_rate(a, rng_seed=1)
    )
    assert (
        stats.seed_game_difference(a, b)
        == stats.seed_game_difference(a, b, rng_seed=0)
        != stats.seed_game_difference(a, b, rng_seed=1)
    )
    assert stats.hierarchical_difference(a, b).games == ((0, 12), (1, 12), (2, 12))
    # a crossed rate of 1: Wilson's interval over the games
    assert stats.crossed_rate({0: games([1.0] * 5), 1: games([1.0] * 5)}) == stats.Interval(
        1.0, *stats.wilson(5, 5)
    )
    # within a seed, a game one side lacks is not paired, crossed or nested
    x, xy = {"x": [1.0]}, {"x": [0.0], "y": [1.0]}
    assert stats.paired_games({0: xy}, {0: x}) == ({0: frozenset({"x"})}, "crossed")
    assert stats.paired_games({0: xy, 1: {"z": [1.0]}}, {0: x, 1: {"z": [0.0], "w": [1.0]}}) == (
        {0: frozenset({"x"}), 1: frozenset({"z"})},
        "nested",
    )
    assert stats.crossed_difference({0: xy}, {0: x}).per_seed == ((0, -1.0),)
    rate = stats.seed_game_rate({0: xy})
    with pytest.raises(dataclasses.FrozenInstanceError):
        rate.design = "nested"  # type: ignore[misc]
