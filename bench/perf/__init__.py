"""Speed and memory of pats: acting and updating against the plain paths (throughput, rollout, update,
flops), the scaffold loop's cost per step (overhead) and in prompt tokens (tokens, turn_tokens), memory
against pats' plan (memory_plan, sdpa_memory, kernel_caches), and the main job end to end (quickstart).
Results in bench/results/; docs/journal/ says what each measured."""
