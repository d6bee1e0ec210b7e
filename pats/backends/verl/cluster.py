"""Ray for a verl run: what the workers get, whether the cluster can place the run, and a preflight on
every node, before verl's trainer starts.

verl 0.9.1's `run_ppo` starts Ray itself unless Ray is up, with its own runtime env merged with
`ray_kwargs.ray_init.runtime_env` from the config. Ray workers on other nodes do not inherit the
launching shell, and the config is printed and logged (to W&B as well), so secrets cannot travel in it.
`init_ray` starts Ray as verl would (the same defaults, the same merge) and adds `run_env`: the
variables a run needs from the launching environment (Hugging Face's cache and token, W&B's key, the
API keys of the LLMs the spec calls), in Ray's job runtime env only, never in a file or the config;
what it prints shows their names, not their values. verl then finds Ray started and keeps it.

verl's switches (`start_env`, `verl_switches`): run_ppo sets VERL_FULL_DETERMINISM, VLLM_BATCH_INVARIANT
and PYTHONHASHSEED from `rollout.full_determinism`, and VERL_RL_INSIGHT_ENABLE from the rl_insight
logger, in its own environment before it builds the runtime env; since pats starts Ray first, it adds
them itself, or the workers would get verl's "0". Every `VERL_*` variable set in the launching
environment goes too (verl 0.9.1 reads ~30 inside its workers: VERL_LOGGING_LEVEL, VERL_PLATFORM,
VERL_AUTO_PADDING, ...), with the determinism variables verl forwards only from its own process
(`VERL_SWITCHES`): Ray workers on other nodes do not inherit the launching shell.

Sizing: where pats starts a local Ray (no `ray start` cluster, no RAY_ADDRESS, no
`ray_kwargs.ray_init.num_cpus`), it gives it the logical CPUs the run needs (`cpus_needed`) when the
machine has fewer cores, so one GPU node runs without a manual `ray start`.

Placement: verl reserves `max_colocate_count` (3) CPUs with each GPU of its resource pools, the
TransferQueue holds one CPU per actor (its controller and `num_data_storage_units` storage units, 8
by default), and every actor created after the pools (the task runner's, the agent-loop workers, the
rollout servers) needs one free CPU to be scheduled. A cluster with fewer logical CPUs waits for the
placement group forever, with no error; `check_cpus` refuses that up front, with the numbers.

`node_preflight` runs one Ray task on every alive node (pinned by node id): pats and verl import there
at the right versions, the bundle's spec loads there with that node's data root and every file it
reads exists; nodes with GPUs also pass pats.backends.verl.preflight's checks (a CUDA torch the
driver runs, the rollout engine, flash-attn when the attention needs it). Every problem of every node
comes back in one PrerequisiteError.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from pats.errors import PrerequisiteError
from pats.spec.models import ExperimentSpec

# Variables read inside Ray workers that no config key sets: Hugging Face's cache and token (model
# downloads on every node), W&B's key and server (verl's trainer and the scaffold service log there).
RUN_ENV = ("HF_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "WANDB_API_KEY", "WANDB_BASE_URL")
CPUS_PER_GPU_KEY = "max_colocate_count"  # verl.single_controller.ray.base.ResourcePoolManager
CPUS_PER_GPU = 3  # verl 0.9.1's max_colocate_count: the CPU part of each GPU's bundle
STORAGE_UNITS_KEY = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
# Determinism switches verl 0.9.1's get_ppo_ray_runtime_env forwards from its own process when set
# (besides VERL_FULL_DETERMINISM and VERL_RL_INSIGHT_ENABLE, which the VERL_ prefix covers).
VERL_SWITCHES = (
    "VLLM_BATCH_INVARIANT",
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    "FLASH_ATTENTION_DETERMINISTIC",
    "NCCL_DETERMINISTIC",
    "NCCL_ALGO",
)


def run_env(spec: ExperimentSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `RUN_ENV` and the key variables of the LLMs the run calls, set in `environ`."""
    from pats.llm_check import called_llms

    names = [*RUN_ENV, *(llm.api_key_env for _, llm in called_llms(spec) if llm.api_key_env)]
    return {name: environ[name] for name in dict.fromkeys(names) if environ.get(name)}


def verl_switches(environ: Mapping[str, str]) -> dict[str, str]:
    """The `VERL_*` variables and `VERL_SWITCHES` set (non-empty) in `environ`."""
    return {k: v for k, v in environ.items() if v and (k.startswith("VERL_") or k in VERL_SWITCHES)}


def start_env(config) -> dict[str, str]:
    """What verl 0.9.1's run_ppo sets in its environment from the config before it starts Ray
    (verl/trainer/main_ppo.py): the determinism switches and the rl_insight logger's."""
    rollout = config.actor_rollout_ref.rollout
    reward_model = config.reward.reward_model
    env = {}
    if rollout.full_determinism or (reward_model.enable and reward_model.rollout.full_determinism):
        env = {"VERL_FULL_DETERMINISM": "1", "VLLM_BATCH_INVARIANT": "1", "PYTHONHASHSEED": str(rollout.seed)}
    loggers = config.trainer.get("logger", [])
    if "rl_insight" in ([loggers] if isinstance(loggers, str) else loggers or []):
        env["VERL_RL_INSIGHT_ENABLE"] = "1"
    return env


def ray_init_kwargs(
    config, extra_env: Mapping[str, str], switches: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What verl's run_ppo passes to ray.init (its default runtime env merged with the config's), with
    `switches` (`verl_switches`) and `start_env` in the defaults, and `extra_env` over everything."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    defaults = get_ppo_ray_runtime_env(config)
    defaults["env_vars"] = {**defaults.get("env_vars", {}), **(switches or {}), **start_env(config)}
    if config.transfer_queue.enable:
        defaults.setdefault("env_vars", {})["TRANSFER_QUEUE_ENABLE"] = "1"
    init = OmegaConf.to_container(config.ray_kwargs.get("ray_init", {}), resolve=True)
    assert isinstance(init, dict), "ray_kwargs.ray_init is a mapping in verl's config"
    runtime_env = OmegaConf.to_container(
        OmegaConf.merge(defaults, init.get("runtime_env") or {}), resolve=True
    )
    assert isinstance(runtime_env, dict)
    runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **extra_env}
    return {**init, "runtime_env": runtime_env}


def init_ray(config, spec: ExperimentSpec, environ: Mapping[str, str] | None = None) -> None:
    """Start Ray (or join RAY_ADDRESS's cluster) as verl's run_ppo would, with `run_env` added; then
    check the CPUs. A Ray already started is left as it is (its runtime env cannot change)."""
    import ray

    environ = os.environ if environ is None else environ
    extra = run_env(spec, environ)
    if not ray.is_initialized():
        kwargs = ray_init_kwargs(config, extra, verl_switches(environ))
        if kwargs.get("num_cpus") is None and _starts_local_ray(kwargs.get("address")):
            need, cores = sum(cpus_needed(config).values()), _cores()
            if need > cores:
                kwargs["num_cpus"] = need
                print(
                    f"ray: a local Ray with {need} logical CPUs, what this run holds at once (this machine "
                    f"has {cores}; logical CPUs are a count, not cores)"
                )
        shown = {**kwargs["runtime_env"], "env_vars": _masked(kwargs["runtime_env"]["env_vars"], extra)}
        print(f"ray init kwargs: { ({**kwargs, 'runtime_env': shown}) }")
        ray.init(**kwargs)
    check_cpus(config, ray.cluster_resources())


def _starts_local_ray(address: str | None) -> bool:
    """Whether ray.init(address=address) starts a new local Ray rather than joining a cluster (RAY_ADDRESS,
    or the latest `ray start` on this machine), as Ray decides it; False where that cannot be told."""
    try:
        from ray._private.services import canonicalize_bootstrap_address

        # Ray's annotation says str; its docstring and code take None ("start a local Ray")
        return canonicalize_bootstrap_address(address) is None  # type: ignore[arg-type]
    except Exception:  # a private function of Ray's: another release may lack it, or no cluster answers
        return False


def _cores() -> int:
    """The CPUs Ray itself would count on this machine (container limits included)."""
    try:
        from ray._private.utils import get_num_cpus

        return int(get_num_cpus())
    except Exception:  # a private function of Ray's
        return os.cpu_count() or 1


def _masked(env_vars: Mapping[str, str], secret: Mapping[str, str]) -> dict[str, str]:
    return {k: ("<from the launching environment>" if k in secret else v) for k, v in env_vars.items()}


def cpus_needed(config) -> dict[str, int]:
    """Logical CPUs verl 0.9.1 holds at once for `config`, term by term (see the module docstring)."""
    from omegaconf import OmegaConf

    gpus = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    units = int(OmegaConf.select(config, STORAGE_UNITS_KEY, default=8) or 0)
    queue = bool(config.trainer.use_v1 or config.transfer_queue.enable)  # TaskRunnerV1 turns it on
    pools = f"resource pools ({gpus} GPU(s) x {CPUS_PER_GPU} CPUs, verl's {CPUS_PER_GPU_KEY})"
    return {
        pools: gpus * CPUS_PER_GPU,
        "TransferQueue controller": 1 if queue else 0,
        f"TransferQueue storage units ({STORAGE_UNITS_KEY})": units if queue else 0,
        "scheduling the actors created after the pools (task runner, agent-loop workers, servers)": 1,
    }


def check_cpus(config, resources: Mapping[str, float]) -> None:
    """Refuse a cluster with fewer logical CPUs than `cpus_needed`: verl would wait for placement forever."""
    terms = cpus_needed(config)
    need, have = sum(terms.values()), int(resources.get("CPU", 0))
    if have >= need:
        return
    lines = "; ".join(f"{what}: {n}" for what, n in terms.items() if n)
    raise PrerequisiteError(
        f"the Ray cluster has {have} logical CPUs and verl needs {need} at once for this run ({lines}); "
        f"with fewer it waits for placement forever. Logical CPUs are a count, not cores: start Ray with "
        f"more (`ray start --head --num-cpus={need}` on a single node, or ray_kwargs.ray_init.num_cpus="
        f"{need} when verl starts Ray), or lower the storage units ({STORAGE_UNITS_KEY}=1 in "
        "trainer.overrides)"
    )


def node_gpus() -> list[float]:
    """The GPUs Ray counts on each alive node of the cluster it is connected to."""
    import ray

    return [float(n["Resources"].get("GPU", 0)) for n in ray.nodes() if n["Alive"]]


def check_gpus(config, gpus: Sequence[float]) -> None:
    """Refuse a Ray cluster that cannot place the run's GPUs: verl 0.9.1 places `trainer.n_gpus_per_node`
    GPUs on each of `trainer.nnodes` nodes (one STRICT_PACK placement group per node), and with fewer it
    stops in its resource pool ("Total available GPUs ... is less than total desired GPUs") after Ray
    and the dataset have started, or waits for placement. `gpus`: Ray's count on each node (`node_gpus`)."""
    nnodes, per_node = int(config.trainer.nnodes), int(config.trainer.n_gpus_per_node)
    if sum(1 for g in gpus if g >= per_node) >= nnodes:
        return
    counts = sorted((int(g) for g in gpus if g >= 1), reverse=True)
    seen = f"{sum(counts)} GPU(s) over {len(gpus)} node(s) (per node: {', '.join(str(int(g)) for g in gpus)})"
    asked = f"{nnodes} node(s) x {per_node} GPU(s) (the spec's trainer.nnodes x trainer.gpus_per_node)"
    if not counts:
        raise PrerequisiteError(
            f"Ray sees no GPU in this cluster ({len(gpus)} node(s)) and the run asks for {asked}: verl trains "
            "on NVIDIA GPUs; check `nvidia-smi` and CUDA_VISIBLE_DEVICES on the nodes, or on a machine "
            "without a GPU use trainer.backend: local"
        )
    # The placement that holds the most GPUs: the n largest nodes at the n-th one's count (ties: the
    # spec's node count, then more nodes).
    _, _, fit_nodes = max((n * counts[n - 1], n == nnodes, n) for n in range(1, len(counts) + 1))
    fit_gpus = counts[fit_nodes - 1]
    nodes = f" trainer.nnodes={fit_nodes}" if fit_nodes != nnodes else ""
    spec, verl = f"trainer.gpus_per_node={fit_gpus}{nodes}", f"trainer.n_gpus_per_node={fit_gpus}{nodes}"
    raise PrerequisiteError(
        f"the Ray cluster has {seen} and the run asks for {asked}, which verl places as {per_node} GPU(s) "
        f"on each of {nnodes} node(s): write the spec override {spec} (`pats run SPEC {spec}`, or `pats "
        f"export verl SPEC OUT {spec}` for a new bundle; `pats plan SPEC {spec}` plans it), or after "
        f"`bash launch.sh` the verl overrides {verl}"
    )


def check_cluster(config, spec_path: str) -> str:
    """The check of the whole Ray cluster before verl places anything: its GPUs (`check_gpus`), then the
    preflight on every node (`node_preflight`). Returns the line both paths print,
    `preflight: <host> (<address>), ...: ok`."""
    check_gpus(config, node_gpus())
    return "preflight: " + ", ".join(node_preflight(config, spec_path)) + ": ok"


# -- the preflight on every node ------------------------------------------------------------------------


def node_problems(config_yaml: str, spec_path: str, gpu: bool) -> tuple[str, list[str]]:
    """(this node's name, what it lacks for the run). Runs as a Ray task on each node."""
    problems: list[str] = []
    try:
        from omegaconf import OmegaConf

        from pats.backends.verl.preflight import (
            engine_problem,
            flash_attn_problem,
            needs,
            torch_problem,
            verl_version_problem,
        )
        from pats.spec import load_spec
        from pats.spec.loader import missing_files

        config = OmegaConf.create(config_yaml)
        need = needs(config)
        problems.append(verl_version_problem(need.engine) or "")
        try:
            spec = load_spec(spec_path)
            problems += [f"{issue.path}: {issue.message}" for issue in missing_files(spec)]
        except Exception as err:  # a spec that does not load here: the bundle's path, the data root
            problems.append(f"the spec {spec_path} does not load here ({' '.join(str(err).split())[:400]})")
        if gpu:
            problems += [torch_problem(need.engine) or "", engine_problem(need.engine) or ""]
            problems.append(flash_attn_problem(need) or "")
    except ImportError as err:
        problems.append(f"pats or verl does not import here ({err}): install pats from a clone on every node")
    return socket.gethostname(), [p for p in problems if p]


def node_preflight(config, spec_path: str) -> list[str]:
    """Run `node_problems` on every alive node of the Ray cluster (one task each, pinned to it); raise
    one PrerequisiteError with every node's problems. Returns the nodes checked."""
    import ray
    from omegaconf import OmegaConf
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    config_yaml = OmegaConf.to_yaml(config, resolve=True)
    task = ray.remote(num_cpus=0)(node_problems)
    nodes = [n for n in ray.nodes() if n["Alive"]]
    pending = [
        task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False), max_retries=0
        ).remote(config_yaml, spec_path, n["Resources"].get("GPU", 0) > 0)
        for n in nodes
    ]
    found, names = [], []
    for node, ref in zip(nodes, pending, strict=True):
        address = node.get("NodeManagerAddress", node["NodeID"][:8])
        try:
            name, problems = ray.get(ref, timeout=600)
        except Exception as err:  # pats not installed there (the task cannot even be loaded), a dead node
            name, problems = address, [f"the preflight task failed ({type(err).__name__}: {str(err)[:400]})"]
        names.append(f"{name} ({address})")
        found += [f"{name} ({address}): {p}" for p in problems]
    if found:
        raise PrerequisiteError(
            "a node of the Ray cluster cannot run the verl config:\n" + "\n".join(f"  - {p}" for p in found)
        )
    return names
