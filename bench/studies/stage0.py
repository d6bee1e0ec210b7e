"""Stage 0: can guidance reach the untrained policy at all? The go/no-go before any demonstration.

The sensitivity probe (bench/studies/sensitivity.py: no training, the untrained policy, training-fold probe
games 500-515 unless `--probe-offset`/`--tasks` say otherwise, `--samples` sampled episodes each, the
sampler reseeded per cell so every cell sees the same games and random stream) over the variables
nobody had tried:
- setting: `twc` (1 room, 2 items, 10 turns) and `twc1-t5` (1 room, 1 item, 5 turns);
- temperature 1.0 and 0.5 (the policy samples from the softmax over admissible actions);
- placement of the guidance: `turn` (right before the admissible actions) and `system`;
- guidance: none, expert (the game's own verified plan: an upper bound), family (one type-scoped skill
  from 8 other training games' plans), control (unrelated text of the family card's length).

A (setting, temperature, placement) passes when none <= 0.10, expert >= 0.25, expert - control >= +0.10
with its 95% interval (paired over games) excluding 0, and the expert likelihood gap >= 0.2 nats
(docs/results.md, stated before the cells ran). `none` does not depend on the placement: one cell.
Cells run none, expert, control, family (`--guidance` plays part of them: family is no criterion);
once none or expert (or the expert's likelihood gap) misses its bar, the combination fails whatever
the rest show, and its remaining cells are skipped unless `--complete` is given.

Each cell writes bench/results/stage0/<setting>-T<temperature>[-<placement>]-<guidance>.json when it
finishes (commit it); a rerun fills only the missing cells. Another policy (or any other spec change)
is given as `--set KEY=VALUE ...` overrides of every probe spec, recorded in each cell; its cells go to
their own folder, named after the overrides (`cells_folder`), never beside the 135M policy's; so do
cells on other probe games than 500-515 (`-games<first>-<last>`): a folder holds one set of games.

    python bench/studies/stage0.py
    python bench/studies/stage0.py --report-only
    python bench/studies/stage0.py --set policy.model=Qwen/Qwen2.5-1.5B-Instruct trainer.device=cuda --check
    python bench/studies/stage0.py --settings twc --temperatures 1.0 --placements turn --probe-offset 600 \
        --tasks 32 --guidance expert control --complete --threads 1 \
        --warm-start bench/results/warm_start/twc_reading_from_cookingworld \
        --set scaffold.plan_view=next policy.score_normalization=sum
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS, add_set_flag, fmt, overrides_key, with_overrides  # noqa: E402
from bench.studies.sensitivity import Probe, setting_spec  # noqa: E402
from pats.stats import paired_bootstrap  # noqa: E402

CELLS = RESULTS / "stage0"
VARIANTS = {"twc": ("twc", 10), "twc1-t5": ("twc1", 5)}  # name -> (sensitivity setting, max_turns)
TEMPERATURES = (1.0, 0.5)
PLACEMENTS = ("turn", "system")
GUIDED = ("expert", "control", "family")
PASS = {"none_max": 0.10, "expert_min": 0.25, "expert_minus_control": 0.10, "gap_min": 0.2}
GAMES = (500, 16)  # the probe games every cell before issue 42 played: (first train-fold index, count)
# Keys every probe spec gets from the grid or a flag: `--set` may not change them (the cell names and
# the warm start would no longer say what played).
OWNED = {
    "environment.max_turns": "--settings (each setting's turn limit)",
    "policy.temperature": "the grid's temperatures (1.0 and 0.5)",
    "scaffold.placement": "the grid's placements (turn and system)",
    "trainer.threads": "--threads",
    "policy.lora": "--warm-start (a fresh adapter changes nothing before training)",
    "policy.init_adapter": "--warm-start",
}


def variant_spec(
    name: str,
    temperature: float,
    placement: str,
    threads: int | None = None,
    warm: Path | None = None,
    overrides: tuple[str, ...] = (),
):
    """The setting's spec at this temperature and placement, with the `--set` overrides; from a warm
    start's adapter (and its LoRA shape, which the adapter must fit) when `warm` is a `pats warm-start`
    output folder."""
    import yaml

    from pats.spec.models import ExperimentSpec

    setting, turns = VARIANTS[name]
    data = setting_spec(setting).model_dump(mode="json")
    data["environment"]["max_turns"] = turns
    data["policy"]["temperature"] = temperature
    data["scaffold"]["placement"] = placement
    data["trainer"]["threads"] = threads
    spec = with_overrides(
        ExperimentSpec.model_validate(data), overrides, OWNED, "bench/studies/stage0.py --set"
    )
    if warm is not None:
        data = spec.model_dump(mode="json")
        trained = yaml.safe_load((warm / "spec.yaml").read_text())["policy"]
        if trained["model"] != data["policy"]["model"]:
            raise SystemExit(
                f"{warm}: the warm start trained {trained['model']}, the probe plays {data['policy']['model']}"
            )
        data["policy"] |= {"lora": trained["lora"], "init_adapter": str(warm / "adapter")}
        spec = ExperimentSpec.model_validate(data)
    return spec


def cells_folder(warm_name: str | None, overrides: list[str], games: tuple[int, int] = GAMES) -> Path:
    """bench/results/stage0[-<warm start name>][-<overrides_key>][-games<first>-<last>]/: without --set
    and on the default probe games, the committed folders."""
    first, count = games
    parts = [
        "stage0",
        *([warm_name] if warm_name else []),
        *([overrides_key(overrides)] if overrides else []),
        *([f"games{first}-{first + count - 1}"] if games != GAMES else []),
    ]
    return RESULTS / "-".join(parts)


def probe_games(cell: dict) -> tuple[int, int]:
    """(first train-fold index, count) of the probe games a cell played, from its task ids."""
    first = int(cell["probe_tasks"][0].rsplit(":", 1)[1])
    return first, len(cell["probe_tasks"])


def check_overrides(folder: Path, overrides: list[str], games: tuple[int, int] | None = None) -> None:
    """Refuse a folder whose cells were played with other --set overrides (two override lists can give
    one folder name) or, when `games` is given, on other probe games: one folder, one policy, spec and
    set of games."""
    for path in sorted(folder.glob("*.json")):
        cell = json.loads(path.read_text())
        had = cell.get("set", [])  # cells written before --set ran without
        if had != overrides:
            raise SystemExit(
                f"{path} was played with --set {had or 'nothing'}, these cells would be {overrides or 'nothing'}: "
                "a folder holds the cells of one set of overrides; move the other cells away first"
            )
        if games is not None and "probe_tasks" in cell and probe_games(cell) != games:
            (a, n), (b, m) = probe_games(cell), games
            raise SystemExit(
                f"{path} played probe games {a}-{a + n - 1}, these cells would play {b}-{b + m - 1}: "
                "a folder holds the cells of one set of games; move the other cells away first"
            )


def cell_id(name: str, temperature: float, placement: str | None, kind: str) -> str:
    return f"{name}-T{temperature}-{placement + '-' if placement else ''}{kind}"


def load(folder: Path, cell: str) -> dict | None:
    path = folder / f"{cell}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def settled(none: dict | None, expert: dict | None) -> str | None:
    """Why a combination already fails whatever its missing cells show, or None.

    Only none, expert and the expert likelihood gap (measured in the expert cell) can fail a
    combination on their own: once one of them misses its bar, control and family cannot change the
    verdict, so they are not run (rule stated in docs/results.md before the cells it skips ran).
    """
    if none is not None and none["success"] > PASS["none_max"]:
        return f"none {none['success']:.3f} > {PASS['none_max']}"
    if expert is None:
        return None
    gap = expert["likelihood_gap"].get("gap")
    if expert["success"] < PASS["expert_min"]:
        return f"expert {expert['success']:.3f} < {PASS['expert_min']}"
    if gap is None or gap < PASS["gap_min"]:
        return f"expert likelihood gap {fmt(gap)} < {PASS['gap_min']}"
    return None


def run(args) -> None:
    args.cells.mkdir(parents=True, exist_ok=True)
    for name in args.settings:
        for temperature in args.temperatures:
            for placement in args.placements:
                kinds = (["none"] if placement == args.placements[0] else []) + list(args.guidance)
                ids = {k: cell_id(name, temperature, None if k == "none" else placement, k) for k in kinds}
                if any(load(args.cells, ids[k]) is None for k in kinds):
                    asyncio.run(play(args, name, temperature, placement, kinds, ids))


async def play(args, name, temperature, placement, kinds, ids) -> None:
    probe = None
    try:
        for kind in kinds:  # none, then expert, then the rest: each decides whether the next is needed
            if load(args.cells, ids[kind]) is not None:
                continue
            why = settled(
                load(args.cells, cell_id(name, temperature, None, "none")), load(args.cells, ids["expert"])
            )
            if kind != "none" and why and not args.complete:
                print(f"{ids[kind]:32s} not run: {why} already fails {name} T{temperature} {placement}", flush=True)  # fmt: skip
                continue
            if probe is None:
                spec = variant_spec(
                    name, temperature, placement, args.threads, args.warm_start, tuple(args.set)
                )
                probe = Probe(VARIANTS[name][0], args, spec=spec)
            result = await probe.cell(kind)
            result |= {
                "variant": name,
                "temperature": temperature,
                "placement": placement if kind != "none" else None,
                "set": args.set,  # the spec overrides every cell of this folder shares (check_overrides)
            }
            (args.cells / f"{ids[kind]}.json").write_text(json.dumps(result, indent=1) + "\n")
            print(f"{ids[kind]:32s} {result['successes']}/{result['episodes']} "
                  f"gap {fmt(result['likelihood_gap'].get('gap'))} ({result['seconds']} s)", flush=True)  # fmt: skip
    finally:
        if probe is not None:
            await probe.close()


def verdict(cells: dict[str, dict], name: str, temperature: float, placement: str) -> tuple[str, bool | None]:
    """One table row for a (setting, temperature, placement), and whether it passes (None: cells missing;
    family is shown, not judged: a row without it has its verdict)."""
    got = {
        k: cells.get(cell_id(name, temperature, None if k == "none" else placement, k))
        for k in ("none", *GUIDED)
    }
    rate = "{:.3f} ({}/{})".format
    if any(got[k] is None for k in ("none", "expert", "control")):
        if why := settled(got["none"], got["expert"]):
            shown = [
                rate(c["success"], c["successes"], c["episodes"]) if c else "not run" for c in got.values()
            ]
            gap = fmt(got["expert"]["likelihood_gap"].get("gap")) if got["expert"] else "not run"
            return (f"| {name} | {temperature} | {placement} | {' | '.join(shown)} | not run | {gap} "
                    f"| fail ({why}) |"), False  # fmt: skip
        have = ", ".join("none (no guidance)" if k == "none" else k for k, c in got.items() if c)
        return (
            f"| {name} | {temperature} | {placement} | {'ran so far: ' + have if have else 'no cell yet'} | | | | | |",
            None,
        )
    none, expert, control, family = (got[k] for k in ("none", "expert", "control", "family"))
    assert none is not None and expert is not None and control is not None  # all ran: see above
    d, lo, hi = paired_bootstrap(expert["per_task"], control["per_task"])
    gap = expert["likelihood_gap"].get("gap")
    checks = [
        none["success"] <= PASS["none_max"],
        expert["success"] >= PASS["expert_min"],
        d >= PASS["expert_minus_control"] and lo > 0,
        gap is not None and gap >= PASS["gap_min"],
    ]
    mark = ["yes" if ok else "**no**" for ok in checks]
    row = (f"| {name} | {temperature} | {placement} | {rate(none['success'], none['successes'], none['episodes'])} {mark[0]} "
           f"| {rate(expert['success'], expert['successes'], expert['episodes'])} {mark[1]} "
           f"| {rate(control['success'], control['successes'], control['episodes'])} "
           f"| {rate(family['success'], family['successes'], family['episodes']) if family else 'not run'} "
           f"| {d:+.3f} [{lo:+.3f}, {hi:+.3f}] {mark[2]} | {fmt(gap)} {mark[3]} "
           f"| {'**PASS**' if all(checks) else 'fail'} |")  # fmt: skip
    return row, all(checks)


def report(
    folder: Path = CELLS, settings=tuple(VARIANTS), temperatures=TEMPERATURES, placements=PLACEMENTS
) -> str:
    """The table of `settings` and of every other setting with cells in `folder` (summary.md is rewritten
    whole: a run of some settings must not drop the rows of the others), at `temperatures` and
    `placements` (the grid's, unless a run played part of it)."""
    cells = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    settings = [n for n in VARIANTS if n in settings or any(c.startswith(f"{n}-T") for c in cells)]
    rows = ["| setting | temperature | placement | none (<= 0.10) | expert (>= 0.25) | control | family "
            "| expert - control (>= +0.10, 95% CI over games excl. 0) | expert likelihood gap (>= 0.2) | verdict |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name in settings:
        for temperature in temperatures:
            for placement in placements:
                rows.append(verdict(cells, name, temperature, placement)[0])
    table = "\n".join(rows)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.md").write_text(table + "\n")
    return table


def main(argv=None) -> None:
    import yaml

    from pats.errors import SpecError

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--settings", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--temperatures", nargs="+", type=float, default=list(TEMPERATURES), choices=TEMPERATURES,
                   help="the grid's temperatures to play (default: both)")  # fmt: skip
    p.add_argument("--placements", nargs="+", default=list(PLACEMENTS), choices=PLACEMENTS,
                   help="the grid's placements to play; none (no guidance) is played once, with the first")  # fmt: skip
    p.add_argument("--tasks", type=int, default=16, help="probe games (training fold)")
    p.add_argument("--samples", type=int, default=8, help="sampled episodes per probe game")
    p.add_argument("--probe-offset", type=int, default=500, help="first probe game in the train fold")
    p.add_argument("--sources", type=int, default=8, help="other training games the family card comes from")
    p.add_argument("--group", type=int, default=4, help="(the rules guidance's group size; unused here)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (1 on a machine shared with other jobs: 2 threads there run far slower)")  # fmt: skip
    p.add_argument("--guidance", nargs="+", default=list(GUIDED), choices=GUIDED,
                   help="the guided cells to play, in the grid's order whatever the order given (default: all; "
                   "family is shown, not judged)")  # fmt: skip
    p.add_argument("--complete", action="store_true",
                   help="also run control and family where none or expert already failed the combination")  # fmt: skip
    p.add_argument("--warm-start", type=Path, default=None, metavar="DIR",
                   help="play from a `pats warm-start` output folder (its adapter/ and spec.yaml's LoRA); "
                   "cells go to bench/results/stage0-<the warm start's spec name>/")  # fmt: skip
    add_set_flag(p, "spec overrides of every probe spec, dotted as in `pats run SPEC KEY=VALUE`, e.g. "
                 "policy.model=Qwen/Qwen2.5-1.5B-Instruct trainer.device=cuda; recorded in each cell. Cells go to "
                 "bench/results/stage0[-<warm start name>]-<each override's last key part and value, letters and "
                 "digits only, joined by '-'>/ (for the example: ...-modelQwenQwen2515BInstruct-devicecuda)")  # fmt: skip
    p.add_argument("--check", action="store_true",
                   help="build and validate every probe spec, print the cells' folder, and stop (nothing loads)")  # fmt: skip
    p.add_argument("--report-only", action="store_true", help="the table from the cell files")
    args = p.parse_args(argv)
    args.guidance = [k for k in GUIDED if k in args.guidance]  # none, expert, control, family: each decides
    games = (args.probe_offset, args.tasks)
    warm_name = None
    if args.warm_start is not None:
        if not (args.warm_start / "adapter").is_dir():
            p.error(f"--warm-start {args.warm_start}: no adapter/ there; give the folder `pats warm-start SPEC` wrote "
                    "(<logging.root>/<name>/warm_start)")  # fmt: skip
        warm_name = yaml.safe_load((args.warm_start / "spec.yaml").read_text())["name"]
    args.cells = cells_folder(warm_name, args.set, games)
    if args.set or args.check:  # every spec the run would build, validated before anything loads
        try:
            for name in args.settings:
                for temperature in args.temperatures:
                    for placement in args.placements:
                        variant_spec(
                            name, temperature, placement, args.threads, args.warm_start, tuple(args.set)
                        )
        except SpecError as err:
            p.exit(SpecError.exit_code, f"error: {err}\n")
    check_overrides(args.cells, args.set, games)
    if args.check:
        print(
            f"ok: {len(args.settings) * len(args.temperatures) * len(args.placements)} probe specs; "
            f"cells go to {args.cells}"
        )
        return
    if not args.report_only:
        run(args)
    print(report(args.cells, args.settings, args.temperatures, args.placements))


if __name__ == "__main__":
    main()
