"""What pats measures about itself that is not a user feature (those are `pats` commands: the reviser
benchmark is `pats reviser bench`, an ablation `pats sweep` and `pats compare`).

- perf/: speed and memory, each against a baseline or a target, side by side in one process;
- studies/: the experiments behind docs/results.md and docs/llm.md, each script's docstring naming its
  question, its command and its result files;
- common.py: what both share (a condition run as `pats run` runs it, held-out outcomes per task, the
  cost model, `--set` overrides, result files); statistics come from pats.stats;
- results/: the committed result files the docs link; runs/ (ignored by git): run directories.

A script runs from the checkout, `python bench/perf/update.py` or `python bench/studies/pilot.py
--report-only`, and imports its neighbours as `bench.common`, `bench.studies.sensitivity`, ...
"""
