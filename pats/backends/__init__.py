"""Policy backends: where the policy acts and trains.

`local` (transformers + peft on CPU or one GPU) is the embedded default; `verl` runs on GPU clusters.
Each implements the `PolicyBackend` protocol (rollout, update, evaluate, save, load).
"""
