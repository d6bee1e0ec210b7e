"""The main job end to end: `pats run experiments/quickstart.yaml` from a cold model cache, then
`pats report`, with where its time and memory go. Prints a phase table (first load and conversion,
each evaluation, each step's rollout and update, checkpoints and the rest, the report) and the total
against issue 60's targets: <= 240 s from nothing (install included) and <= 2.0 GiB peak RSS.
Writes bench/results/quickstart.json.

    python bench/perf/quickstart.py               # the run from a cold model cache
    python bench/perf/quickstart.py --warm        # keep ~/.cache/pats (skips the model conversion)
    python bench/perf/quickstart.py --install     # also time ./scripts/install into a new venv with an
                                                  # empty pip cache (the README's command from nothing)

The phases come from the run's own progress lines (one per step and per evaluation, timestamped as
they arrive) and its metrics (time/rollout_s, time/update_s); memory from /proc/PID/status, sampled
every 0.2 s (VmRSS for each phase's peak, VmHWM for the run's). Timings are this machine's: run it on
an idle one, or say what shared it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import REPO, RESULTS, add_set_flag, write_result

TARGET_S, TARGET_GIB = 240.0, 2.0
SAMPLE_S = 0.2
STEP = re.compile(r"\] step (\d+) ")
EVAL = re.compile(r"\] eval of the checkpoint ")


@dataclass
class Memory:
    """The child's resident memory, sampled: the largest VmRSS seen since the last mark, and VmHWM."""

    pid: int
    since_mark: float = 0.0
    hwm: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:  # gone
            return
        for line in status.splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                gib = int(value.split()[0]) / 1024**2  # kB -> GiB
                if name == "VmRSS":
                    self.since_mark = max(self.since_mark, gib)
                else:
                    self.hwm = max(self.hwm, gib)

    def watch(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            self.sample()

    def mark(self) -> float:
        """The peak since the last mark (sampled), and start a new phase."""
        self.sample()
        peak, self.since_mark = self.since_mark, 0.0
        return peak


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    peak_gib: float  # sampled VmRSS peak within the phase (a spike shorter than SAMPLE_S can escape it)


def run_quickstart(
    python: str, root: Path, env: dict[str, str], overrides: list[str]
) -> tuple[list[tuple[float, str, float]], float, float]:
    """Run the quickstart; returns (its first progress line and each step's and evaluation's, with
    its time since start and the peak since the line before, then the exit), the total seconds and
    VmHWM in GiB."""
    command = [python, "-m", "pats", "run", str(REPO / "experiments/quickstart.yaml"),
               f"logging.root={root}", "logging.progress=true", *overrides]  # fmt: skip
    start = time.perf_counter()
    # Progress lines go to stderr (pats.engine.progress): read both streams as one.
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=REPO, text=True
    )
    memory = Memory(child.pid)
    watcher = threading.Thread(target=memory.watch, daemon=True)
    watcher.start()
    marks: list[tuple[float, str, float]] = []
    assert child.stdout is not None
    for line in child.stdout:  # not a terminal: one plain line per step and per evaluation, and the rest
        print(line, end="", flush=True)
        if line.startswith("[") and (not marks or EVAL.search(line) or STEP.search(line)):
            marks.append((time.perf_counter() - start, line.strip(), memory.mark()))
    code = child.wait()
    seconds = time.perf_counter() - start
    memory.stop.set()
    watcher.join()
    marks.append((seconds, "exit", memory.mark()))
    if code != 0:
        raise SystemExit(f"pats run exited with {code}; its output is above")
    return marks, seconds, memory.hwm


def phases(marks: list[tuple[float, str, float]], metrics: list[dict]) -> list[Phase]:
    """The run cut at its progress lines: the first line ends the load; an evaluation line ends an
    evaluation, which began at the line before it; a step line ends the step's rollout, update and
    review (its metrics say how long each took); what lies between a step's end and the next step's
    start (checkpoints, W&B, the summary) goes to 'the rest'."""
    steps = {int(m["step"]): m for m in metrics if "time/step_s" in m}
    out = [Phase("imports, first model load and conversion, environments", marks[0][0], marks[0][2])]
    rest, rest_peak = 0.0, 0.0
    for (before, _, _), (at, line, peak) in zip(marks, marks[1:], strict=False):
        took = at - before
        if EVAL.search(line):
            out.append(Phase(line.split("] ", 1)[1].split(":")[0], took, peak))
        elif found := STEP.search(line):
            step = int(found.group(1))
            m = steps[step]
            for part in ("rollout", "update"):
                out.append(Phase(f"step {step}: {part}", m[f"time/{part}_s"], peak))
            review = m["time/step_s"] - m["time/rollout_s"] - m["time/update_s"]
            out.append(Phase(f"step {step}: review and commit after the update", review, peak))
            rest += took - m["time/step_s"]  # the checkpoint of the step before it (its peak: the step's)
        else:  # the exit: the last checkpoint, closing W&B, the summary
            rest += took
            rest_peak = max(rest_peak, peak)
    out.append(Phase("checkpoints, W&B, summary (between the above)", rest, rest_peak))
    return out


def install_from_nothing(tmp: Path) -> float:
    """Seconds for the README's install (`./scripts/install VENV`) into a new venv, pip cache empty."""
    env = dict(os.environ, PIP_CACHE_DIR=str(tmp / "pip-cache"))
    start = time.perf_counter()
    subprocess.run([str(REPO / "scripts" / "install"), str(tmp / "venv")], env=env, check=True, cwd=REPO)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warm", action="store_true", help="reuse the converted model cache")
    parser.add_argument(
        "--install", action="store_true", help="also time the install from nothing, and run in that venv"
    )
    add_set_flag(
        parser,
        "spec overrides for the run, e.g. trainer.autocast_bf16=false (the table is then not the main job's)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        installed = install_from_nothing(tmp) if args.install else None
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if not args.warm:
            env["PATS_CACHE"] = str(tmp / "cache")  # include the one-time GGUF conversion
        python = str(tmp / "venv" / "bin" / "python") if args.install else sys.executable
        marks, seconds, peak = run_quickstart(python, tmp / "runs", env, args.set)
        run_dir = tmp / "runs" / "quickstart"
        metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        table = phases(marks, metrics)
        start = time.perf_counter()
        subprocess.run([python, "-m", "pats", "report", str(run_dir)], check=True, cwd=REPO,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        table.append(Phase("pats report (plots, summary.md)", time.perf_counter() - start, 0.0))
    print("\n| phase | seconds | share | peak RSS (GiB, sampled) |\n| --- | ---: | ---: | ---: |")
    for p in table:
        print(f"| {p.name} | {p.seconds:.1f} | {p.seconds / seconds:.0%} | {p.peak_gib:.2f} |")
    total = seconds + (installed or 0.0)
    print(f"| **pats run, in all** | **{seconds:.1f}** | 100% | **{peak:.2f}** (VmHWM) |")
    where = f"install {installed:.0f} s + run {seconds:.0f} s" if installed is not None else "run only"
    print(
        f"\nquickstart: {total:.0f} s ({where}) = {total / TARGET_S:.2f}x of the {TARGET_S:.0f}-second "
        f"target ({'cold' if not args.warm else 'warm'} model cache); peak RSS {peak:.2f} GiB = "
        f"{peak / TARGET_GIB:.2f}x of {TARGET_GIB} GiB"
    )
    result = {
        "seconds": seconds,
        "install_seconds": installed,
        "peak_gib": peak,
        "cold_cache": not args.warm,
        "overrides": args.set,
        "time_ratio": total / TARGET_S,
        "memory_ratio": peak / TARGET_GIB,
        "phases": [{"name": p.name, "seconds": p.seconds, "peak_gib": p.peak_gib} for p in table],
        "load_average": os.getloadavg(),
    }
    print(f"wrote {write_result('quickstart', result, RESULTS)}")


if __name__ == "__main__":
    main()
