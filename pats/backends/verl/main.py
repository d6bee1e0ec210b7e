"""`python3 -m pats.backends.verl.main OVERRIDE...`: verl's `main_ppo`, with pats' Ray start and checks.

What launch.sh runs in place of `python3 -m verl.trainer.main_ppo`, with the same Hydra overrides: the
config composed as main_ppo composes it (verl's `ppo_trainer.yaml`), verl's `validate_config`, then
(pats.backends.verl.cluster) Ray started as run_ppo would start it plus the variables the run needs
from this shell (never in the config), verl's own switches (VERL_FULL_DETERMINISM and the rest), the
CPU count the placement needs, and the preflight on every node of the cluster, which only
`PATS_SKIP_PREFLIGHT=all` skips (`head`, or 1, skips launch.sh's check of the launching node alone);
then verl's own `run_ppo` with its V1 task runner, which finds Ray started. Departure from main_ppo:
Hydra writes no `outputs/` folder.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from pats.errors import PatsError


def main(argv: Sequence[str] | None = None) -> int:
    overrides = list(sys.argv[1:] if argv is None else argv)
    try:
        run(overrides)
    except PatsError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    return 0


def run(overrides: Sequence[str]) -> None:
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    from pats.backends.verl.cluster import init_ray, node_preflight
    from pats.backends.verl.config import check, compose
    from pats.backends.verl.preflight import SKIP_VARIABLE, resolve_attention, skipped
    from pats.spec import load_spec

    skip = skipped(os.environ)  # an unknown value stops here, before anything starts
    config = compose(overrides)
    print(f"preflight: {resolve_attention(config)}")  # flash_attention_2 where flash_attn imports, else sdpa
    auto_set_device(config)
    check(config)  # verl's validate_config, as main_ppo runs it
    spec_path = str(config.pats.spec)
    init_ray(config, load_spec(spec_path))
    if "nodes" in skip:
        print(f"preflight: the nodes of the Ray cluster are not checked ({SKIP_VARIABLE}=all)")
    else:
        print("preflight: " + ", ".join(node_preflight(config, spec_path)) + ": ok")
    run_ppo(config, task_runner_class=TaskRunnerV1)


if __name__ == "__main__":
    sys.exit(main())
