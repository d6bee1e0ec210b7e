"""The main job end to end: `pats run experiments/quickstart.yaml` from a cold model cache, then
`pats report`. Prints wall time against the 10-minute target and peak memory against 8 GB, as ratios.
Writes bench/results/quickstart.json.

    python bench/perf/quickstart.py [--warm]    # --warm keeps ~/.cache/pats (skips the model conversion)
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `bench.` imports as a script

from bench.common import REPO, RESULTS, write_result

TARGET_S, TARGET_GB = 600.0, 8.0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--warm", action="store_true", help="reuse the converted model cache")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        if not args.warm:
            env["PATS_CACHE"] = str(Path(tmp) / "cache")  # include the one-time GGUF conversion
        root = Path(tmp) / "runs"
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pats",
                "run",
                str(REPO / "experiments/quickstart.yaml"),
                f"logging.root={root}",
                "logging.progress=false",
            ],
            env=env,
            check=True,
            cwd=REPO,
        )
        seconds = time.perf_counter() - start
        peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2  # KiB -> GiB
        subprocess.run(
            [sys.executable, "-m", "pats", "report", str(root / "quickstart")], check=True, cwd=REPO
        )
        summary = (root / "quickstart" / "report" / "summary.md").read_text()
    result = {
        "seconds": seconds,
        "peak_gb": peak_gb,
        "cold_cache": not args.warm,
        "time_ratio": seconds / TARGET_S,
        "memory_ratio": peak_gb / TARGET_GB,
    }
    print(summary)
    print(
        f"quickstart: {seconds:.0f} s = {seconds / TARGET_S:.2f}x of the 10-minute target "
        f"({'cold' if not args.warm else 'warm'} model cache); peak memory {peak_gb:.2f} GB = "
        f"{peak_gb / TARGET_GB:.2f}x of 8 GB"
    )
    out = write_result("quickstart", result, RESULTS)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
