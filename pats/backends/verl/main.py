"""`python3 -m pats.backends.verl.main OVERRIDE...`: verl's `main_ppo`, with pats' Ray start and checks.

What launch.sh runs in place of `python3 -m verl.trainer.main_ppo`, with the same Hydra overrides: the
config composed as main_ppo composes it (verl's `ppo_trainer.yaml`), verl's `validate_config`, then
(pats.backends.verl.cluster) Ray started as run_ppo would start it plus the variables the run needs
from this shell (never in the config), verl's own switches (VERL_FULL_DETERMINISM and the rest), the
CPU count the placement needs, the cluster's GPUs against the run's (`check_gpus`), and the preflight
on every node of the cluster, which only `PATS_SKIP_PREFLIGHT=all` skips (`head`, or 1, skips the
launching node's own check alone); then verl's own `run_ppo` with its V1 task runner, which finds Ray
started. `pats run` does the same after its own check of the node (`train`, from
pats.backends.verl.launch.run_verl). Departure from main_ppo: Hydra writes no `outputs/` folder.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from pats.errors import PatsError
from pats.spec.models import ExperimentSpec


def main(argv: Sequence[str] | None = None) -> int:
    overrides = list(sys.argv[1:] if argv is None else argv)
    try:
        run(overrides)
    except PatsError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    return 0


def run(overrides: Sequence[str]) -> None:
    from pats.backends.verl.config import compose
    from pats.backends.verl.preflight import resolve_attention, skipped
    from pats.spec import load_spec

    skip = skipped(os.environ)  # an unknown value stops here, before anything starts
    config = compose(overrides)
    print(f"preflight: {resolve_attention(config)}")  # flash_attention_2 where flash_attn imports, else sdpa
    train(config, load_spec(str(config.pats.spec)), skip)


def train(config, spec: ExperimentSpec, skip: frozenset[str]) -> None:
    """What `pats run` and launch.sh do alike once the config is composed and the launching node checked:
    verl's validate_config, pats' Ray start, the check of the cluster's GPUs and of every node (printed
    `preflight: <host> (<address>): ok`) unless `skip` has "nodes", then verl's run_ppo."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    from pats.backends.verl.cluster import check_cluster, init_ray
    from pats.backends.verl.config import check
    from pats.backends.verl.preflight import SKIP_VARIABLE

    auto_set_device(config)
    check(config)  # verl's validate_config, as main_ppo runs it
    init_ray(config, spec)
    if "nodes" in skip:
        print(f"preflight: the nodes of the Ray cluster are not checked ({SKIP_VARIABLE}=all)")
    else:
        print(check_cluster(config, str(config.pats.spec)))
    run_ppo(config, task_runner_class=TaskRunnerV1)


if __name__ == "__main__":
    sys.exit(main())
