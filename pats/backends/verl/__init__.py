"""The verl backend: pats specs trained with verl's GRPO on GPU nodes (one or several, through Ray).

- `config`: the spec as verl Hydra overrides (one function), composed and checked with verl's own code.
- `data`: the environment's task lists as verl parquet rows.
- `loop`: the agent loops verl runs per sample (`PatsAgentLoop` for training, `PatsValidationLoop`).
- `service`: the scaffold store as a named Ray actor: pins views per group, reviews at step boundaries.
- `launch`: `pats run` for verl specs and `pats export verl SPEC OUT/`.
- `preflight`: what the composed config needs on the node that runs it (verl, CUDA torch, the
  rollout engine, flash-attn), checked by `pats run` and launch.sh before verl starts.

Nothing here imports verl or Ray at module level: `import pats.backends.verl` works without them, and
the functions that need them name the install command when they are missing.
"""
