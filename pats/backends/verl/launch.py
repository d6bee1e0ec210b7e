"""`pats run` for verl specs, and `pats export verl SPEC OUT/`: the same bundle of files either way.

A bundle folder holds what a verl run needs besides verl itself:
  spec.yaml          the resolved pats spec (the agent loops and the scaffold service read it)
  train.parquet      training tasks (agent_name pats_agent)
  val.parquet        held-out tasks (agent_name pats_validation: never a scaffold)
  agent_loops.yaml   the loop registry verl reads through rollout.agent.agent_loop_config_path
  launch.sh          the preflight (pats.backends.verl.preflight), then `python3 -m pats.backends.verl.main`
                     (verl's main_ppo after pats' Ray start), every override, paths relative to itself

`pats run` writes the bundle to <run dir>/verl/ and calls verl's `run_ppo` in-process with the same
overrides; a cluster user runs `bash OUT/launch.sh` on the Ray head node instead. Either way Ray is
started by pats.backends.verl.cluster first (the run's variables from the launching environment, the CPU
count, the preflight on every node).

`pats export verl` (pats.backends.verl.export) writes the same bundle, self-contained and whole or
not at all.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from pats.backends.verl.config import (
    RUNTIME_ENV_VARS,
    SCAFFOLD_VALIDATION_LOOP,
    TRAIN_LOOP,
    VALIDATION_LOOP,
    WORKER_ENV,
    compose,
    require_verl,
    verl_overrides,
    worker_env,
)
from pats.backends.verl.preflight import check_node, resolve_attention, skip_line, skipped
from pats.errors import PrerequisiteError
from pats.fileio import write_atomic
from pats.spec import ExperimentSpec, spec_to_yaml

AGENT_LOOPS = f"""\
# pats agent loops for verl (rollout.agent.agent_loop_config_path); rows pick one by agent_name.
- name: {TRAIN_LOOP}
  _target_: pats.backends.verl.loop.PatsAgentLoop
- name: {VALIDATION_LOOP}
  _target_: pats.backends.verl.loop.PatsValidationLoop
- name: {SCAFFOLD_VALIDATION_LOOP}
  _target_: pats.backends.verl.loop.PatsScaffoldValidationLoop
"""

EXPORT_DEFAULTS = ("ALFWORLD_DATA", "PATS_DATA")  # their values at export are launch.sh's defaults
# The extras of pats each environment's agent loops import on every node (pyproject.toml).
ENV_EXTRAS = {"alfworld": ("alfworld",), "webshop": ("search",), "search_qa": ("search",)}
# The alfworld extra's two packages without wheels on PyPI (both built from source here, 2026-12-05).
ALFWORLD_BUILD = (
    "a C/C++ toolchain for the alfworld extra, whose fast-downward-textworld and jericho (textworld's) "
    "have no wheel on PyPI and build from source at install (gcc, g++, make and cmake: "
    "`apt-get install build-essential cmake` on Debian or Ubuntu; about 5 minutes once, pip caches the wheels)"
)


def node_install(spec: ExperimentSpec) -> str:
    """The install of pats every node of a verl run of `spec` needs: from a clone (the `pats` on PyPI is
    another project), editable as scripts/install makes it (a wheel of the clone works too: it ships the
    rubrics and the reviser prompt of judges/)."""
    extras = ("verl", *ENV_EXTRAS.get(spec.environment.kind, ()))
    if "llm" in (spec.judge.kind, spec.reviser.kind):
        extras += ("llm",)
    return f"pip install -e '/path/to/pats[{','.join(extras)}]'"


def model_path(spec: ExperimentSpec) -> str:
    """A directory or Hugging Face id verl can load (the embedded policy is converted once)."""
    from pats.models import resolve_model_dir

    return str(resolve_model_dir(spec.policy.model))


# -- `pats run`: the bundle in the run directory -------------------------------------------------


def write_bundle(spec: ExperimentSpec, out: Path, run_dir: str, data: bool = True) -> list[str]:
    """Write the bundle to `out`; returns the overrides with absolute paths (for an in-process run).
    `data=False` skips the parquet files (they need the environment's task lists)."""
    out.mkdir(parents=True, exist_ok=True)
    model = model_path(spec)
    write_files(spec, out, model, data, export_defaults())
    return bundle_overrides(spec, str(out.resolve()), str(Path(run_dir).resolve()), model)


def bundle_overrides(spec: ExperimentSpec, here: str, run_dir: str, model: str) -> list[str]:
    """The overrides of a bundle at `here`, with this process' `WORKER_ENV` in the runtime env."""
    return verl_overrides(
        spec,
        train_files=f"{here}/train.parquet",
        val_files=f"{here}/val.parquet",
        agent_loops=f"{here}/agent_loops.yaml",
        spec_path=f"{here}/spec.yaml",
        run_dir=run_dir,
        model_path=model,
        worker_env=worker_env(os.environ),
    )


def write_files(
    spec: ExperimentSpec,
    out: Path,
    model: str,
    data: bool,
    env: Mapping[str, str],
    spec_text: str | None = None,
) -> None:
    """The bundle's files; `spec_text` is spec.yaml's text when it differs from `spec_to_yaml(spec)`
    (an export keeps `${data:...}` for files under the data root)."""
    write_atomic(out / "spec.yaml", spec_to_yaml(spec) if spec_text is None else spec_text)
    write_atomic(out / "agent_loops.yaml", AGENT_LOOPS)
    script = verl_overrides(
        spec,
        train_files="$HERE/train.parquet",
        val_files="$HERE/val.parquet",
        agent_loops="$HERE/agent_loops.yaml",
        spec_path="$HERE/spec.yaml",
        run_dir="$RUN_DIR",
        model_path=model,
    )  # the runtime env's WORKER_ENV is added by the script, from the launching shell
    write_atomic(out / "launch.sh", launch_script(spec, script, env))
    (out / "launch.sh").chmod(0o755)
    if data:
        from pats.backends.verl.data import write_task_data

        write_task_data(spec, out)


def export_defaults() -> dict[str, str]:
    return {name: value for name, value in worker_env(os.environ).items() if name in EXPORT_DEFAULTS}


def launch_script(spec: ExperimentSpec, overrides: list[str], env: Mapping[str, str] | None = None) -> str:
    """launch.sh: `env` holds defaults for `WORKER_ENV` variables the launching shell does not set."""
    tr = spec.verl_trainer()
    lines = [
        "#!/usr/bin/env bash",
        f"# Run: bash launch.sh            (pats spec '{spec.name}' as a verl GRPO run)",
        f"# {tr.nnodes} node(s) x {tr.gpus_per_node} GPU(s), rollouts with {tr.rollout_engine}, "
        f"{tr.steps} steps of {tr.tasks_per_step} tasks x {tr.group_size} rollouts.",
        "# Written by `pats export verl`. Needs on every node: pats from a clone (the `pats` on PyPI is",
        f"# another project): `{node_install(spec)}`, and the rollout engine:",
        f'# `pip install "verl[{tr.rollout_engine}]==0.9.1"` (torch for CUDA 13: an NVIDIA driver >= 580;',
        "# older drivers: the cuda12 route of pats' docs/verl.md). Several nodes: `ray start --head` here,",
        "# `ray start --address=<head>:6379` on the others, this folder at the same path on every node",
        "# (a shared filesystem), then run this script on the head node. The run directory (scaffold",
        "# versions, events.jsonl, checkpoints) is $PATS_RUN_DIR, default ./run beside this script.",
        *(
            ["# The alfworld extra builds from source: a C/C++ toolchain on every node (README.md)."]
            if "alfworld" in ENV_EXTRAS.get(spec.environment.kind, ())
            else []
        ),
        "# More Hydra overrides go after the script name: bash launch.sh trainer.save_freq=5",
        "# First it checks this node (verl's version, a CUDA torch the driver runs, the rollout engine,",
        "# flash-attn unless the attention is sdpa); then pats.backends.verl.main checks every node of the",
        "# Ray cluster. PATS_SKIP_PREFLIGHT=head skips this node's check alone (a head node without GPUs;",
        "# the GPU nodes are still checked), PATS_SKIP_PREFLIGHT=all both.",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        'RUN_DIR="${PATS_RUN_DIR:-$HERE/run}"',
        "# Ray workers on other nodes do not inherit this shell: these variables go into the job's",
        "# runtime env when set. Defaults: their values where the bundle was written; yours win.",
    ]
    for name, value in (env or {}).items():
        lines.append(f'if [ -z "${{{name}:-}}" ]; then export {name}={shlex.quote(value)}; fi')
    lines += [
        "WORKER_ENV=()",
        f"for var in {' '.join(WORKER_ENV)}; do",
        f'  if [ -n "${{!var:-}}" ]; then WORKER_ENV+=("+{RUNTIME_ENV_VARS}.$var=\'${{!var}}\'"); fi',
        "done",
        "# Task rows: written here from spec.yaml when missing (an export with --no-data).",
        'if [ ! -f "$HERE/train.parquet" ] || [ ! -f "$HERE/val.parquet" ]; then',
        '  echo "launch.sh: writing train.parquet and val.parquet from spec.yaml" >&2',
        '  python3 -m pats.backends.verl.data "$HERE"',
        "fi",
        "OVERRIDES=(",
    ]
    for item in overrides:
        # $HERE/$RUN_DIR expand; OmegaConf's ${...} interpolations reach Hydra as written.
        quoted = f'"{item}"' if "$HERE" in item or "$RUN_DIR" in item else shlex.quote(item)
        lines.append(f"    {quoted}")
    lines += [
        ")",
        'if [ -n "${WORKER_ENV[*]:-}" ]; then OVERRIDES+=("${WORKER_ENV[@]}"); fi',  # set -u in old bash
        # It reads PATS_SKIP_PREFLIGHT itself (pats.backends.verl.preflight.skipped, the one reader).
        'python3 -m pats.backends.verl.preflight "${OVERRIDES[@]}" "$@"',
        'mkdir -p "$RUN_DIR"',
        # verl's main_ppo, with Ray started with this shell's run variables, the CPU count checked and
        # the preflight on every node (pats.backends.verl.main).
        'python3 -m pats.backends.verl.main "${OVERRIDES[@]}" "$@"',
    ]
    return "\n".join(lines) + "\n"


def run_verl(spec: ExperimentSpec, run_dir: Path) -> Path:
    """Train `spec` with verl in this process (Ray starts locally unless RAY_ADDRESS names a cluster).
    Resuming is verl's: trainer.resume_mode=auto finds <run_dir>/checkpoints. The checks are launch.sh's
    (this node's, then the cluster's, `PATS_SKIP_PREFLIGHT` read by the same function)."""
    skip = skipped(os.environ)  # an unknown value stops here, before anything is written
    require_verl()
    overrides = write_bundle(spec, run_dir / "verl", run_dir=str(run_dir))
    config = compose(overrides)
    print(f"verl: {resolve_attention(config)}")  # where the spec leaves it to pats: flash-attn or SDPA
    if "head" in skip:
        print(skip_line(os.environ))
    else:
        try:
            check_node(config)  # a refused run leaves nothing: run_spec removes what it wrote
        except PrerequisiteError as err:
            raise PrerequisiteError(
                f"{err}\nOn a machine without a GPU use trainer.backend: local, or export the run for a GPU "
                "node with `pats export verl SPEC OUT/`"
            ) from None
    from pats.backends.verl.main import train

    train(config, spec, skip)
    return run_dir
