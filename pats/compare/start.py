"""What a cell's evaluation of its untrained policy (`eval.at_start`) depends on, but the seed: `Start`.
Two cells of one seed with the same start played the same evaluation, so `pats compare`'s untrained row
(pats.compare.untrained) may take it from either; `differing` names the spec fields where two starts
part."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from pydantic import BaseModel

from pats.spec.models import ExperimentSpec


@dataclass(frozen=True)
class Start:
    """What a cell's evaluation of its untrained policy depends on, but the seed."""

    policy_model: str
    init_adapter: str | None
    policy: tuple[
        tuple[str, str], ...
    ]  # the rest of the policy section (sampling, action, LoRA): (field, JSON)
    environment: tuple[tuple[str, str], ...]  # the environment section: (field, JSON)
    games: tuple[int, int]  # the eval split's tasks [first, stop) that evaluations play
    samples_per_task: int
    greedy: bool
    backend: str


# The spec field each of Start's fields comes from, as the notes name it; of the policy and environment
# sections (field, JSON) pairs, `differing` names each field that differs.
FIELD_NAMES = {
    "policy_model": "policy.model",
    "init_adapter": "policy.init_adapter",
    "games": "eval.first_task / eval.num_tasks",
    "samples_per_task": "eval.samples_per_task",
    "greedy": "eval.greedy",
    "backend": "trainer.backend",
}


def _fields(section: BaseModel, exclude: frozenset[str] = frozenset()) -> tuple[tuple[str, str], ...]:
    dumped = section.model_dump(mode="json", exclude=set(exclude))
    return tuple((k, json.dumps(v, sort_keys=True)) for k, v in sorted(dumped.items()))


def start_of(spec: ExperimentSpec) -> Start:
    games = spec.eval_tasks()
    return Start(
        policy_model=spec.policy.model,
        init_adapter=spec.policy.init_adapter,
        policy=_fields(spec.policy, frozenset({"model", "init_adapter"})),
        environment=_fields(spec.environment),
        games=(games.start, games.stop),
        samples_per_task=spec.eval.samples_per_task,
        greedy=spec.eval.greedy,
        backend=spec.trainer.backend,
    )


def differing(a: Start, b: Start) -> list[str]:
    """The spec fields in which two starts differ (`policy.temperature`, `eval.greedy`, ...)."""
    out = []
    for f in fields(Start):
        mine, theirs = getattr(a, f.name), getattr(b, f.name)
        if mine == theirs:
            continue
        if f.name in ("policy", "environment"):  # (field, value) pairs: the fields of either side's unmatched
            out += [f"{f.name}.{k}" for k in sorted({k for k, _ in set(mine) ^ set(theirs)})]
        else:
            out.append(FIELD_NAMES[f.name])
    return out
