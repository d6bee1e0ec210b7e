"""Cost of capping torch's and oneDNN's matmul kernel caches (pats.backends.local.memory,
`small_kernel_caches`, issue 25): time and peak resident memory of the same GRPO updates with the caps
and with torch's defaults (1024 entries each).

The caps are read once per process, so each variant runs in a child process of its own: each child
plays `--tasks` groups of 4 quickstart episodes (the same, seeded), then runs `--updates` updates on
their decisions, every one with an advantage (bench/perf/update.py's), and reports their seconds and its
peak RSS (VmHWM). Children alternate between the variants for `--rounds` rounds; medians reported.
The first update is the one that meets new matmul shapes, as every update of a run does; the later
ones repeat its shapes, where the default caches hit and the capped may not. The machine is shared:
compare the ratios. Writes bench/results/kernel_caches.json.

    python bench/perf/kernel_caches.py [--rounds 2] [--tasks 1] [--updates 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import RESULTS, write_result
from pats.backends.local.memory import KERNEL_CACHES

TORCH_DEFAULTS = dict.fromkeys(KERNEL_CACHES, "1024")


def child(tasks: int, updates: int) -> None:
    from bench.perf.update import SPEC, decisions
    from pats.backends.local import training
    from pats.backends.local.backend import LocalBackend
    from pats.engine.run import check_policy_inputs, make_env_factory
    from pats.spec import load_spec

    spec = load_spec(SPEC, [])
    check_policy_inputs(spec)
    backend = LocalBackend(spec, make_env_factory(spec))
    stored = decisions(backend, tasks)
    asyncio.run(backend.close())
    seconds = []
    for _ in range(updates):
        items = [backend.train_item(s, adv, w) for s, adv, w in stored]
        start = time.perf_counter()
        training.run_update(backend.policy, items)
        seconds.append(time.perf_counter() - start)
    status = Path("/proc/self/status").read_text().splitlines()
    peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
    print(json.dumps({"seconds": seconds, "peak_gib": peak_kib / 2**20, "decisions": len(stored)}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="child processes per variant, alternating")
    parser.add_argument("--tasks", type=int, default=1, help="groups of 4 episodes to collect decisions from")
    parser.add_argument("--updates", type=int, default=2, help="updates per child on the same decisions")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.tasks, args.updates)

    clean = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHES}
    variants = {"capped": clean, "torch defaults": clean | TORCH_DEFAULTS}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    command = [sys.executable, __file__, "--child", f"--tasks={args.tasks}", f"--updates={args.updates}"]
    for _ in range(args.rounds):
        for name, env in variants.items():
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"  {name}: {runs[name][-1]}", flush=True)

    def median(name: str, which: slice) -> float:
        return statistics.median(s for run in runs[name] for s in run["seconds"][which])

    summary = {
        name: {
            "first_update_s": median(name, slice(0, 1)),
            "later_updates_s": median(name, slice(1, None)) if args.updates > 1 else None,
            "peak_gib": statistics.median(run["peak_gib"] for run in runs[name]),
        }
        for name in variants
    }
    capped, default = summary["capped"], summary["torch defaults"]
    ratios = {"first_update": capped["first_update_s"] / default["first_update_s"]}
    if args.updates > 1:
        ratios["later_updates"] = capped["later_updates_s"] / default["later_updates_s"]
    result = {"caps": KERNEL_CACHES, "runs": runs, "summary": summary, "capped/default": ratios}
    path = write_result("kernel_caches", result, RESULTS)
    print(f"wrote {path}")
    for name, s in summary.items():
        later = "-" if s["later_updates_s"] is None else f"{s['later_updates_s']:.1f} s"
        print(
            f"{name}: first update {s['first_update_s']:.1f} s, later {later}, peak {s['peak_gib']:.2f} GiB"
        )
    print("capped/default time: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
