"""The summary table that opens docs/results.md says what the committed result files hold.

Each row names its evidence in its last column as links, `[data](PATH "KIND ARGS")`: PATH is a
committed file or folder under bench/results/, and the link's title says how to read it (KIND, one of
the readers below). The row's first data link is its latest answer; the ones after it are the earlier
or companion runs the row folds in (issue 50: one row per question). For each row the test reads
every PATH, recomputes the numbers (the intervals with pats.stats, as `pats compare` and the
benchmarks do), and checks that
- every number in the row's question, setting and result columns is one its files give (their
  protocol, counts, rates, differences and intervals);
- the result column shows the headline numbers the first data link's reader names (e.g. a difference
  and its interval);
- the verdict column starts with the verdict the first data link's numbers give under the stated
  criterion (bold), and any number in it is a criterion's or a result's;
- the row's first link, its journal entry (under docs/journal/, or docs/llm.md), exists, and so does
  the heading its anchor names (tests/test_doc_links.py checks every other link of docs/).
A row whose verdict is **running** has no numbers yet: it is checked for that, and skipped otherwise.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout, for bench.*

from test_doc_links import slugs  # noqa: E402

from bench.studies.demonstration import outcomes as demo_outcomes  # noqa: E402
from bench.studies.pilot import by_seed  # noqa: E402
from bench.studies.stage0 import PASS, verdict  # noqa: E402
from pats.stats import Interval, paired_bootstrap, seed_game_difference, seed_game_rate  # noqa: E402

RESULTS = REPO / "docs" / "results.md"
COLUMNS = ["question", "setting", "result [95% interval]", "verdict", "details"]
NUMBER = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?(?:/\d+)?")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)(?:\s+\"([^\"]*)\")?\)")


@dataclass
class Reading:
    """What a result file says: the numbers it supports (as the table writes them), the ones the row
    must show, the verdict under the stated criterion (None: not judged here), and the criterion's
    own numbers, which the verdict column may quote."""

    numbers: set[str] = field(default_factory=set)
    must: list[str] = field(default_factory=list)
    verdict: str | None = None
    criterion: set[str] = field(default_factory=set)

    def rate(self, x: float) -> str:
        self.numbers.add(f"{x:.3f}")
        return f"{x:.3f}"

    def signed(self, x: float, digits: int = 3) -> str:
        self.numbers.add(f"{x:+.{digits}f}")
        return f"{x:+.{digits}f}"

    def interval(self, i: Interval, signed: bool) -> list[str]:
        f = self.signed if signed else self.rate
        return [f(i.estimate), f(i.lo), f(i.hi)]

    def ints(self, *xs: float) -> None:
        self.numbers.update(str(int(x)) for x in xs)

    def count(self, k: float, n: float) -> str:
        self.numbers.add(f"{round(k)}/{round(n)}")
        return f"{round(k)}/{round(n)}"


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _difference_verdict(d: Interval, target: float) -> str:
    """The held-out comparisons' criterion: at least `target` with an interval above 0 passes; an
    interval that reaches 0 resolves nothing; otherwise (resolved, below target) it fails."""
    if d.lo <= 0 <= d.hi:
        return "not resolved"
    return "pass" if d.lo > 0 and d.estimate >= target else "fail"


def _endpoints_verdict(verdicts: set[str]) -> str:
    """A row of several held-out comparisons (each `_difference_verdict`): their one verdict when they
    agree; "mixed" when some pass and some do not; "fail" when none passes and one fails (resolved
    below the bar), the others not resolved."""
    return verdicts.pop() if len(verdicts) == 1 else "mixed" if "pass" in verdicts else "fail"


def read_pilot_heldout(path: Path, args: list[str]) -> Reading:
    """bench/studies/pilot.py's held-out test: the trained cells ARGS[0]-s<seed> against untrained-s<seed> on
    the same dev games and sampling seeds; target +0.05 (issue 34)."""
    r = Reading(criterion={"+0.05", "0"})
    trained = [_load(p) for p in sorted(path.glob(f"{args[0]}-s*.json"))]
    base = {c["seed"]: c for c in map(_load, path.glob("untrained-s*.json"))}
    untrained = [base[c["seed"]] for c in trained]
    t, u = by_seed(trained), by_seed(untrained)
    d = seed_game_difference(t, u)
    rate_t, rate_u = seed_game_rate(t).interval, seed_game_rate(u).interval
    r.must = [r.rate(rate_t.estimate), r.rate(rate_u.estimate), *r.interval(d.interval, signed=True)]
    r.interval(rate_t, signed=False)
    r.interval(rate_u, signed=False)
    for _, x in d.per_seed:
        r.signed(x)
    for c in trained + untrained:
        r.count(c["heldout"]["successes"], c["heldout"]["episodes"])
        if "distinct_games" in c:
            r.ints(c["distinct_games"])
    p = trained[0]["protocol"]
    r.ints(len(trained), p["steps"], p["pool"], p["heldout"], p["samples"], p["heldout_offset"])
    r.ints(p["heldout_offset"] + p["heldout"] - 1)
    r.verdict = _difference_verdict(d.interval, 0.05)
    return r


def read_pilot_pool(path: Path, args: list[str]) -> Reading:
    """bench/studies/pilot.py's endpoint: pool success after the last step minus before the first, mean over
    the seeds of the cells ARGS[0]-s<seed>; target +0.30."""
    r = Reading(criterion={"+0.30"})
    cells = [_load(p) for p in sorted(path.glob(f"{args[0]}-s*.json"))]
    p = cells[0]["protocol"]
    n = p["pool"] * p["samples"]
    deltas = []
    for c in cells:
        start, end = c["curve"][0]["pool/success"], c["curve"][-1]["pool/success"]
        r.count(start * n, n)
        r.count(end * n, n)
        r.numbers.add(f"{end - start:+.2f}")
        deltas.append(end - start)
    mean = sum(deltas) / len(deltas)
    r.must = [f"{mean:+.2f}"]
    r.numbers.update(r.must)
    r.ints(len(cells), p["steps"], p["pool"])
    r.verdict = "pass" if mean >= 0.30 else "fail"
    return r


def read_demonstration(path: Path, args: list[str]) -> Reading:
    """bench/studies/demonstration.py's cells: ARGS[0] lists `X-Y` differences (comma-separated), ARGS[1] the
    held-out records pooled (`heldout`, `heldout_fresh`, joined by +); the stated target, X - none >=
    +0.05 with an interval excluding 0."""
    r = Reading(criterion={"+0.05", "0"})
    cells = [_load(p) for p in sorted(path.glob("*-s*.json"))]
    keys = tuple(args[1].split("+"))
    verdicts = set()
    for pair in args[0].split(","):
        a, b = pair.split("-")
        x, y = (demo_outcomes([c for c in cells if c["condition"] == k], keys) for k in (a, b))
        d = seed_game_difference(x, y)
        r.must += r.interval(d.interval, signed=True)
        r.interval(seed_game_rate(x).interval, signed=False)
        r.interval(seed_game_rate(y).interval, signed=False)
        for _, v in d.per_seed:
            r.signed(v)
        # seeds of X whose scaffold had no entry left after its first step (removal emptied it)
        first = [c["train"][0]["scaffold/entries"] for c in cells if c["condition"] == a]
        r.ints(sum(n == 0 for n in first))
        verdicts.add(_difference_verdict(d.interval, 0.05))
    p = cells[0]["protocol"]
    r.ints(len({c["seed"] for c in cells}), p["pool"], p["steps"], p["samples"], p["heldout"] * len(keys))
    r.verdict = _endpoints_verdict(verdicts)
    return r


def read_sensitivity(path: Path, args: list[str]) -> Reading:
    """bench/studies/sensitivity.py's cells of setting ARGS[0] for the guidance kinds ARGS[1:] (the first
    is the one judged): its lift over none (the row's headline) and over the unrelated control text of
    the same length (the verdict: shown when that interval excludes 0), paired bootstrap over games."""
    r = Reading(criterion={"0"})
    setting, kinds = args[0], args[1:]
    cells = {k: _load(path / f"{setting}-{k}.json") for k in {*kinds, "none", "control"}}
    for c in cells.values():
        r.count(c["successes"], c["episodes"])
        r.rate(c["success"])
    for a in cells:
        for b in cells:
            if a != b:
                for x in paired_bootstrap(cells[a]["per_task"], cells[b]["per_task"]):
                    r.signed(x)
    head = paired_bootstrap(cells[kinds[0]]["per_task"], cells["none"]["per_task"])
    r.must = [f"{x:+.3f}" for x in head]
    _, lo, _ = paired_bootstrap(cells[kinds[0]]["per_task"], cells["control"]["per_task"])
    games = cells["none"]["probe_tasks"]
    r.ints(len(games), cells["none"]["episodes"] // len(games))
    r.verdict = "shown" if lo > 0 else "not shown"
    return r


def read_stage0(path: Path, args: list[str]) -> Reading:
    """A bench/studies/stage0.py folder (one pick, or the first grid): every cell's wins, rates and likelihood
    gaps, expert - control where both ran; the row shows the best expert cell. Verdict: stage0.py's
    own (a pass of any combination passes the folder)."""
    r = Reading(criterion={f"{v:.2f}" for v in PASS.values()} | {f"{v}" for v in PASS.values()})
    r.criterion |= {"+0.10"}
    cells = {p.stem: _load(p) for p in sorted(path.glob("*.json"))}
    assert cells, f"{path}: no cells"
    for c in cells.values():
        r.count(c["successes"], c["episodes"])
        r.rate(c["success"])
        gap = c["likelihood_gap"]
        if gap.get("gap") is not None:
            r.rate(gap["gap"])
            r.rate(gap["nll_without"])
            r.rate(gap["nll_with"])
            r.ints(gap["pairs"])
        games = [int(t.rsplit(":", 1)[1]) for t in c["probe_tasks"]]
        r.ints(len(games), c["episodes"] // len(games), min(games), max(games))
        r.numbers.add(f"{c['temperature']}")
    for stem, c in cells.items():
        if c["kind"] == "expert" and (control := cells.get(stem.replace("-expert", "-control"))):
            for x in paired_bootstrap(c["per_task"], control["per_task"]):
                r.signed(x)
    best = max((c for c in cells.values() if c["kind"] == "expert"), key=lambda c: c["success"], default=None)
    if best is not None:
        r.must = [r.count(best["successes"], best["episodes"])]
    combos = {(c["variant"], c["temperature"], c["placement"]) for c in cells.values() if c["kind"] != "none"}
    combos |= {
        (c["variant"], c["temperature"], "turn")
        for c in cells.values()
        if c["kind"] == "none" and not any(v == c["variant"] and t == c["temperature"] for v, t, _ in combos)
    }
    passes = [verdict(cells, *combo)[1] for combo in sorted(combos)]
    r.verdict = "pass" if any(passes) else "fail" if all(p is False for p in passes) else "running"
    return r


def read_warm_start(path: Path, args: list[str]) -> Reading:
    """A `pats warm-start` report: the examples whose target only the guidance names, NLL before and
    after against the uniform guess; the stated sanity bar (at least 1 nat below uniform)."""
    r = Reading(criterion={"1"})
    rep = _load(path / "report.json")
    for v in rep.values():
        if isinstance(v, float):
            r.rate(v)
    r.ints(rep["examples"], rep["tasks"], rep["measured_examples"])
    keys = ("nll_necessary_examples_before", "nll_necessary_examples_after", "nll_necessary_uniform")
    r.must = [f"{rep[k]:.3f}" for k in keys]
    bar = rep["nll_necessary_examples_after"] <= rep["nll_necessary_uniform"] - 1
    r.verdict = "fit" if bar else "no fit"
    return r


def read_learning(path: Path, args: list[str]) -> Reading:
    """bench/studies/learning.py's result file: held-out wins per condition and the informative-group ratio
    pats/none (target >= 1.5; and held-out pats - none >= +0.10 where a held-out test ran)."""
    r = Reading(criterion={"1.5", "+0.10"})
    res = _load(path)
    ratio = res["comparisons"]["pats-none"]["informative_early_ratio"]
    r.must = [f"{ratio:.2f}"]
    r.numbers.update(r.must)
    for c in res["conditions"].values():
        if c["heldout"]:
            r.count(c["heldout"]["successes"], c["heldout"]["episodes"])
        r.rate(c["informative"])
    if res["untrained_heldout"]:
        r.count(res["untrained_heldout"]["successes"], res["untrained_heldout"]["episodes"])
    s = res["sizes"]
    r.ints(s["steps"], len(s["seeds"]), s["heldout_tasks"], s["tasks_per_step"], s["group_size"])
    diff = res["comparisons"]["pats-none"]["heldout_diff"]
    r.verdict = "pass" if ratio >= 1.5 and (diff is None or diff >= 0.10) else "fail"
    return r


def read_tokens(path: Path, args: list[str]) -> Reading:
    """bench/perf/tokens.py's result file: prompt tokens per rollout, pats over grow (target <= 0.6)."""
    r = Reading(criterion={"0.6"})
    res = _load(path)
    for v in res["ratios"].values():
        r.numbers.add(f"{v['per_rollout']:.2f}")
    r.must = [f"{res['ratios']['pats/grow']['per_rollout']:.2f}"]
    r.verdict = "pass" if res["ratios"]["pats/grow"]["per_rollout"] <= 0.6 else "fail"
    return r


def read_reviser(path: Path, args: list[str]) -> Reading:
    """bench/results/reviser/: the row links docs/llm.md's table (held to these files by
    tests/test_reviser_bench.py) instead of repeating it; only the number of bundles may appear."""
    r = Reading()
    for p in path.glob("*.json"):
        if "bundles" in (res := _load(p)).get("summary", {}):
            r.ints(res["summary"]["bundles"])
    return r


def read_reviser_programs(path: Path, args: list[str]) -> Reading:
    """bench/results/reviser/ and LABEL[:BAR] ...: each program's held-out first answers (valid sets of
    bundles) and their kinds of edit as the rules' (`kinds_as_rules`). A program with a BAR was stated
    to pass at >= 14 of 19 valid at the first answer and kinds >= BAR (docs/llm.md); the verdict is
    pass or fail when all such programs agree, mixed otherwise."""
    r = Reading()
    outcomes = []
    for arg in args:
        label, _, bar = arg.partition(":")
        s = _load(path / f"{label}.json")["summary"]
        kinds = f"{s['kinds_as_rules']:.2f}"
        r.numbers.add(kinds)
        r.must.append(kinds)
        r.count(s["sets_valid"], s["bundles"])
        if bar:
            r.criterion |= {bar, "14/19"}
            outcomes.append(s["sets_valid"] >= 14 and s["kinds_as_rules"] >= float(bar))
    r.verdict = "pass" if all(outcomes) else "fail" if not any(outcomes) else "mixed"
    return r


def read_sense(path: Path, args: list[str]) -> Reading:
    """bench/results/reviser/ and LABEL ...: each sense-LABEL.json's change in success after the sets
    (its interval) and its sets against the rules' sets on the same episodes; the tasks and episodes
    per set. "no effect measured" when every one of those intervals reaches 0, "effect" otherwise."""
    r = Reading()
    spans_zero, changes = [], []
    for label in args:
        res = _load(path / f"sense-{label}.json")
        s = res["summary"]
        r.ints(res["tasks_per_set"], res["episodes_per_task"], s["episodes"])
        r.signed(s["change"])
        changes.append(s["change"])
        intervals = [s["change_interval"]] + ([s["vs_rules"]["interval"]] if "vs_rules" in s else [])
        spans_zero += [lo <= 0 <= hi for lo, hi in intervals]
    r.must = [f"{min(changes):+.3f}", f"{max(changes):+.3f}"]
    r.numbers.add("0")  # the intervals' reaching 0 is what the row reports
    r.verdict = "no effect measured" if all(spans_zero) else "effect"
    return r


def read_sweep(path: Path, args: list[str]) -> Reading:
    """A sweep folder read as `pats compare` reads it: ARGS in pairs, a baseline and the conditions
    whose difference to it is an endpoint (comma-separated), e.g. `stage2-none stage2-static-expert,
    stage2-pats-expert stage2-static-expert stage2-pats-expert` for three endpoints against two
    baselines; the stated pass, each difference >= +0.05 with its interval excluding 0
    (docs/journal/2026-12-05-stage1.md); the verdict `_endpoints_verdict`'s. Every row's rates (without
    the scaffold and with it), reliance gap and difference, and the protocol, are numbers the row may
    quote."""
    from pats.compare.runs import read_run, run_dirs
    from pats.compare.table import compare
    from pats.spec import load_spec

    assert args and len(args) % 2 == 0, f"sweep {path.name}: ARGS are pairs BASELINE CONDITIONS, got {args}"
    endpoints = {(b, c) for b, cs in zip(args[::2], args[1::2], strict=True) for c in cs.split(",")}
    r = Reading(criterion={"+0.05", "0"})
    dirs = run_dirs([path])
    table = compare([read_run(d) for d in dirs], list(dict.fromkeys(args[::2])))
    for d in dirs:  # the protocol: pool, steps, groups, held-out games and episodes
        spec = load_spec(d / "spec.yaml")
        held = spec.eval_tasks()
        r.ints(spec.environment.num_train_tasks, spec.trainer.steps, spec.trainer.tasks_per_step,
               spec.trainer.group_size, held.start, held.stop - 1, spec.eval.samples_per_task)  # fmt: skip
    for row in table.rows:
        if row.heldout is not None:
            r.interval(row.heldout, signed=False)
        if row.heldout_with_scaffold is not None:
            r.interval(row.heldout_with_scaffold, signed=False)
        if row.reliance_gap is not None:
            r.interval(row.reliance_gap.interval, signed=True)
        r.ints(len(row.seeds), row.episodes, *(n for _, n in row.games))
    verdicts, found = set(), set()
    for d in table.differences:
        said = r.interval(d.difference.interval, signed=True)  # the untrained row's too
        if (d.baseline, d.condition) in endpoints:
            found.add((d.baseline, d.condition))
            r.must += said
            for _, v in d.difference.per_seed:
                r.signed(v)
            verdicts.add(_difference_verdict(d.difference.interval, 0.05))
    assert found == endpoints, f"sweep {path.name}: no difference for {sorted(endpoints - found)}"
    r.verdict = _endpoints_verdict(verdicts)
    return r


READERS: dict[str, Callable[[Path, list[str]], Reading]] = {
    "pilot-heldout": read_pilot_heldout,
    "pilot-pool": read_pilot_pool,
    "demonstration": read_demonstration,
    "sensitivity": read_sensitivity,
    "stage0": read_stage0,
    "warm-start": read_warm_start,
    "learning": read_learning,
    "tokens": read_tokens,
    "reviser": read_reviser,
    "reviser-programs": read_reviser_programs,
    "sense": read_sense,
    "sweep": read_sweep,
}


@functools.cache
def read(kind: str, path: Path, args: tuple[str, ...]) -> Reading:
    """READERS[kind], once per data link (rows may name the same)."""
    return READERS[kind](path, list(args))


@dataclass(frozen=True)
class Data:
    """One data link of a row: the result file or folder and how to read it."""

    path: Path
    kind: str
    args: tuple[str, ...]


@dataclass
class Row:
    cells: list[str]
    data: list[Data]  # the latest answer first, then the runs the row folds in
    journal: tuple[Path, str]  # the row's first link: its journal entry and anchor ("" for the top)

    @property
    def verdict(self) -> str:
        m = re.match(r"\*\*([^*]+)\*\*", self.cells[3])
        return m.group(1) if m else ""


def summary_rows(path: Path = RESULTS) -> list[Row]:
    """The rows of the first table under the doc's "Summary" heading."""
    doc = path.name
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"#+ Summary\b", line))
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == COLUMNS, f"{doc}: the summary's columns are {header}"
    rows = []
    for line in table[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(COLUMNS), f"{doc}: {line}"
        links = LINK.findall(cells[4])
        data = [
            Data((path.parent / target).resolve(), title.split()[0], tuple(title.split()[1:]))
            for _, target, title in links
            if title
        ]
        assert data and links[0][0] == "journal" and not links[0][2], (
            f"{doc}: a row's details open with its journal link, then its data links: {line}"
        )
        doc_file, _, anchor = links[0][1].partition("#")
        journal = (path.parent / doc_file).resolve() if doc_file else path
        rows.append(Row(cells, data, (journal, anchor)))
    return rows


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def check_row(row: Row) -> None:
    question, setting, result, verdict_cell, _ = row.cells
    where = f"docs/results.md, row {question!r}"
    for d in row.data:
        assert d.kind in READERS, f"{where}: no reader {d.kind!r} (one of {sorted(READERS)})"
        assert d.path.is_relative_to(REPO / "bench" / "results"), f"{where}: {d.path} is not a result file"
    journal, anchor = row.journal
    assert journal.is_file(), f"{where}: its journal link names {journal}, which does not exist"
    assert not anchor or anchor in slugs(journal), f"{where}: no heading #{anchor} in {journal.name}"
    if row.verdict == "running":
        assert not numbers(result), f"{where}: a running row has no numbers yet: {result}"
        return
    for d in row.data:
        assert d.path.exists(), f"{where}: {d.path} does not exist"
    latest, *folded = (read(d.kind, d.path, d.args) for d in row.data)
    given = latest.numbers.union(*(r.numbers for r in folded))
    names = ", ".join(sorted({d.path.name for d in row.data}))
    for col, text in (("question", question), ("setting", setting), ("result", result)):
        extra = [n for n in numbers(text) if n not in given]
        assert not extra, f"{where}: {col} has {extra}, which {names} does not give"
    missing = [n for n in latest.must if n not in numbers(result)]
    assert not missing, f"{where}: the result must show {missing} ({row.data[0].path.name})"
    if latest.verdict is not None:
        assert row.verdict == latest.verdict, (
            f"{where}: verdict **{row.verdict}**, the numbers say {latest.verdict}"
        )
    criteria = latest.criterion.union(*(r.criterion for r in folded))
    extra = [n for n in numbers(verdict_cell) if n not in given | criteria]
    assert not extra, f"{where}: the verdict quotes {extra}, neither a result nor the criterion"


def test_every_summary_row_says_what_its_result_files_hold():
    rows = summary_rows()
    assert 10 <= len(rows) <= 12, f"the summary has {len(rows)} rows: one per question, at most ~12"
    for row in rows:
        check_row(row)


def test_every_stage0_folder_and_pilot_campaign_is_in_a_row():
    listed = {d.path for r in summary_rows() for d in r.data}
    folders = [p for p in (REPO / "bench" / "results").glob("stage0*") if any(p.glob("*.json"))]
    folders += [p for p in (REPO / "bench" / "results" / "pilot").iterdir() if any(p.glob("*.json"))]
    assert folders
    missing = [p.name for p in folders if p.resolve() not in listed]
    assert not missing, f"result folders without a summary row: {missing}"


def test_the_data_each_row_names_is_committed():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for row in summary_rows():
        if row.verdict == "running":
            continue
        for d in row.data:
            rel = d.path.relative_to(REPO)
            tracked = subprocess.run(
                ["git", "ls-files", "--", str(rel)], cwd=REPO, capture_output=True, text=True
            )
            assert tracked.stdout.strip(), f"{rel} is not committed"


def test_a_wrong_number_is_caught():
    """The check can fail: the transfer pilot's row with the interval first reported (nested, which
    the crossed design replaces), with a verdict its numbers do not give, without its latest answer's
    headline, and with a folded run's numbers but not its file."""
    row = next(r for r in summary_rows() if r.data[0].kind == "pilot-heldout" and "128-159" in r.cells[1])
    check_row(row)
    wrong = Row(list(row.cells), list(row.data), row.journal)
    wrong.cells[2] = row.cells[2].replace("[-0.008, +0.250]", "[+0.020, +0.219]")
    assert wrong.cells[2] != row.cells[2]
    with pytest.raises(AssertionError, match="does not give"):
        check_row(wrong)
    wrong.cells[2], wrong.cells[3] = row.cells[2], "**pass**: target +0.05"
    with pytest.raises(AssertionError, match="the numbers say not resolved"):
        check_row(wrong)
    wrong.cells[3] = row.cells[3]
    wrong.cells[2] = row.cells[2].replace("+0.055 [-0.086, +0.203]", "+0.055")
    with pytest.raises(AssertionError, match="must show"):
        check_row(wrong)
    wrong.cells[2], wrong.data = row.cells[2], [row.data[0]]  # the first seeds' file left out
    with pytest.raises(AssertionError, match="does not give"):
        check_row(wrong)


def test_a_folded_run_never_sets_the_verdict():
    """The verdict is the latest answer's: the transfer row read with its recurring-pool run first
    must show that run's headline, not the row's."""
    row = next(r for r in summary_rows() if r.data[0].kind == "pilot-heldout" and "128-159" in r.cells[1])
    swapped = Row(list(row.cells), [row.data[-1], *row.data[:-1]], row.journal)
    with pytest.raises(AssertionError, match="must show"):
        check_row(swapped)


def test_a_sweep_endpoint_that_is_not_in_the_sweep_is_refused():
    """A sweep link names its endpoints as (baseline, conditions) pairs; a pair `pats compare` did not
    give (a misspelt or absent condition) fails the row instead of leaving that endpoint unread."""
    stage1 = REPO / "bench" / "results" / "sweeps" / "stage1"
    assert read_sweep(stage1, ["stage1-none", "stage1-pats-expert"]).verdict == "not resolved"
    with pytest.raises(AssertionError, match="no difference for"):
        read_sweep(stage1, ["stage1-none", "stage1-pats-expert", "stage1-pats", "stage1-pats-expertt"])
    with pytest.raises(AssertionError, match="pairs"):
        read_sweep(stage1, ["stage1-none", "stage1-pats-expert", "stage1-pats"])


def test_endpoints_that_fail_or_resolve_nothing_make_a_row_that_fails_not_a_mixed_one():
    """Stage 2: two endpoints resolved below 0 and one whose interval reaches 0; none passes, so the row
    fails ("mixed" is for a row some of whose endpoints pass)."""
    stage2 = REPO / "bench" / "results" / "sweeps" / "stage2"
    assert read_sweep(stage2, ["stage2-static-expert", "stage2-pats-expert"]).verdict == "not resolved"
    assert read_sweep(stage2, ["stage2-none", "stage2-static-expert,stage2-pats-expert"]).verdict == "fail"
    both = [
        "stage2-none",
        "stage2-static-expert,stage2-pats-expert",
        "stage2-static-expert",
        "stage2-pats-expert",
    ]
    assert read_sweep(stage2, both).verdict == "fail"
