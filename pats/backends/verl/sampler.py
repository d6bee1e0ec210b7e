"""verl's sync replay buffer, made to stop the job when the scaffold service has stopped the run.

verl 0.9.1's V1 trainer samples each step's groups from a replay buffer over the TransferQueue
(verl/trainer/ppo/v1/replay_buffer.py). An agent loop that raises marks its group `failure`, and the
buffer logs it and goes on: by default a failed group stays sampleable (its missing trajectories are
padded downstream) and only a step where every selected group failed raises, with verl's message
("Enable trainer.v1.sampler.sync_refill_failed_groups ..."); with `sync_refill_failed_groups` it
draws replacements, which fail again, forever. So the scaffold service's stop (`scaffold.
max_failed_reviews` failed reviews in a row, a resume that does not match verl's checkpoint, a first
prompt the loop refused) would end the job with the wrong reason, or never.

`PatsReplayBuffer` is verl's own `ReplayBuffer`, plugged in where verl takes a custom sampler
(`trainer.v1.sampler.custom_sampler`, loaded in the trainer's process): before each look at the queue,
and when verl's own sampling raises, it asks the service whether it stopped the run at this step, and
raises the service's reason (`TrainingError`), which ends `fit` and the job. A step whose review
failed trains on (as the local engine's does); the run stops at the next step's sampling. verl passes a custom sampler only its common
arguments, so the sync buffer's own (`sync_refill_failed_groups`, the batch sizes) come through
`sampler_kwargs`, which pats' overrides fill from the same config keys verl reads (`SAMPLER_KWARGS`).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from pats.errors import TrainingError


def stop_reason(spec_path: str, run_dir: str, global_steps: int | None) -> str | None:
    """Why the run's scaffold service stopped the run at verl's step `global_steps`, or None (tests
    replace this)."""
    from pats.backends.verl.service import connect

    return connect(spec_path, run_dir).stop_reason_now(global_steps)


class PatsReplayBuffer(ReplayBuffer):
    """verl's sync `ReplayBuffer` that raises the scaffold service's stop (see the module docstring)."""

    def __init__(self, *, trainer_mode: str, sampler_kwargs: Any, **kwargs: Any):
        if trainer_mode != "sync":
            raise TrainingError(
                f"pats runs verl's sync trainer (trainer.v1.trainer_mode=sync), not {trainer_mode}: the "
                "scaffold service pins one version per step"
            )
        pats = dict(sampler_kwargs)
        self.spec_path, self.run_dir = str(pats.pop("pats_spec")), str(pats.pop("pats_run_dir"))
        self.global_steps: int | None = None  # of the sample in progress
        refill = bool(pats.pop("sync_refill_failed_groups"))
        train_batch = int(pats.pop("train_batch_size"))
        gen_batch = pats.pop("gen_batch_size", None)
        super().__init__(
            trainer_mode=trainer_mode,
            sampler_kwargs=OmegaConf.create(pats),
            filter_groups_metric=None,  # verl's DAPO group filter: not used by pats
            sync_refill_failed_groups=refill,
            train_batch_size=train_batch,
            # What verl's trainer passes its built-in sync buffer (trainer_base._build_replay_buffer).
            gen_batch_size=1 if refill else int(gen_batch or train_batch),
            max_inflight_gen_batches=1,
            **kwargs,
        )

    def raise_if_stopped(self) -> None:
        reason = stop_reason(self.spec_path, self.run_dir, self.global_steps)
        if reason is not None:
            raise TrainingError(f"the pats scaffold service stopped the run: {reason}")

    def _sync_metadata_from_transfer_queue(self):
        self.raise_if_stopped()  # every turn of the sampling loop, refills included
        return super()._sync_metadata_from_transfer_queue()

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        self.global_steps = global_steps
        try:
            return super().sample(global_steps, partition_id, batch_size)
        except Exception:
            self.raise_if_stopped()  # the service's reason over verl's "no materializable trajectories"
            raise
