"""The experiments behind docs/results.md (learning, pilot, demonstration, sensitivity, stage0, ceiling,
reading_gap) and docs/llm.md (reviser: the embedded model as the reviser and the benchmark's own checks;
reviser_sense: what accepted edit sets change in play), each script's docstring naming its question, its
command and its result files in bench/results/."""
