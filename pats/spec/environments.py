"""Environment sections of the spec, one model per `kind` (a discriminated union).

Each model holds what its environment needs to list and start tasks. Paths a spec names are made
absolute by the loader (relative to the spec file that names them); `pats validate` also checks that
they exist.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from pats.spec.base import SpecModel

TwxGame = Literal[
    "twc", "cookingworld", "coin", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder"
]
AlfworldTaskType = Literal[
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
]
ALFWORLD_TASK_TYPES: tuple[str, ...] = AlfworldTaskType.__args__  # type: ignore[attr-defined]

# Tokens one turn adds to an episode besides the policy's output: the 90th percentile of the rendered
# observation (with the admissible actions, where listed) along expert episodes, measured by
# bench/turn_tokens.py (bench/results/turn_tokens.json, SmolLM2's tokenizer as a proxy), plus 16 for
# the chat template's turn markers. verl keeps an episode as one growing chat, so its response budget
# must hold max_turns of these (pats.spec.models checks it).
ENV_TURN_TOKENS = {"twx": 180, "alfworld": 248, "webshop": 245, "search_qa": 532}


class _EnvCommon(SpecModel):
    max_turns: int = Field(10, ge=1, le=200, description="Turns per episode before it counts as failed.")
    history_window: int = Field(
        2, ge=0, le=50, description="How many past action/observation pairs the prompt shows."
    )
    num_train_tasks: int = Field(1000, ge=1, description="Size of the training task pool.")
    num_eval_tasks: int = Field(128, ge=1, description="Held-out tasks used by evaluation.")


class TwxEnvSpec(_EnvCommon):
    """TextWorldExpress games (ships its games; needs Java 17)."""

    kind: Literal["twx"] = "twx"
    game: TwxGame = "twc"
    params: dict[str, int] = Field(
        default_factory=dict,
        description="Game parameters passed to TextWorldExpress, e.g. {numLocations: 1}.",
    )
    train_fold: Literal["train", "dev", "test"] = "train"
    eval_fold: Literal["train", "dev", "test"] = "dev"
    reward: Literal["win", "score"] = Field(
        "win", description="win: 1 if the game is won else 0; score: the game's own partial score."
    )


AlfworldSplit = Literal["train", "valid_seen", "valid_unseen", "valid_train"]


class AlfworldEnvSpec(_EnvCommon):
    """The real ALFWorld TextWorld-PDDL games."""

    kind: Literal["alfworld"] = "alfworld"
    data_dir: str | None = Field(
        None,
        description=(
            "ALFWorld's game data: the folder holding json_2.1.1/ (as `alfworld-download` fills it), a "
            "json_2.1.1_*.tar.xz tarball or a folder of them (unpacked once to $PATS_CACHE/alfworld); "
            "unset means $ALFWORLD_DATA."
        ),
    )
    task_types: tuple[AlfworldTaskType, ...] = Field(
        ALFWORLD_TASK_TYPES, min_length=1, description="Task types to play; games of other types are skipped."
    )
    train_split: AlfworldSplit = Field("train", description="json_2.1.1 split the training tasks come from.")
    eval_split: AlfworldSplit = Field(
        "valid_seen", description="json_2.1.1 split the held-out tasks come from."
    )
    task_seed: int = Field(
        0,
        description=(
            "Seed of the fixed task order: games are sorted by path, shuffled with this seed, then the "
            "first num_train_tasks / num_eval_tasks are used (the same on every worker and machine)."
        ),
    )
    max_turns: int = Field(50, ge=1, le=200)


class WebshopEnvSpec(_EnvCommon):
    """WebShop's text protocol over a product catalog (bm25s search)."""

    kind: Literal["webshop"] = "webshop"
    catalog: str | None = Field(
        None,
        description="WebShop's items_shuffle*.json (products); unset (with instructions unset) uses the "
        "small built-in catalog.",
    )
    attributes: str | None = Field(
        None,
        description="WebShop's items_ins_v2*.json (each product's attribute list, which the reward "
        "matches); unset: attributes count only where they occur in a product's texts.",
    )
    instructions: str | None = Field(
        None, description="WebShop's items_human_ins.json (the goals); set together with catalog."
    )
    search_results: int = Field(10, ge=1, le=50, description="Products shown per results page.")
    max_turns: int = Field(15, ge=1, le=200)


class Bm25RetrieverSpec(SpecModel):
    """bm25s over a JSONL corpus, indexed in memory once per corpus file and process."""

    kind: Literal["bm25"] = "bm25"
    corpus: str = Field(
        description='JSONL corpus with one passage per line ({"id", "contents"}; the first line of '
        "contents is the title, as in Search-R1's wiki-18)."
    )
    top_k: int = Field(3, ge=1, le=50, description="Passages returned per search.")


class HttpRetrieverSpec(SpecModel):
    """A client of Search-R1's retrieval server (search_r1/search/retrieval_server.py)."""

    kind: Literal["http"] = "http"
    url: str = Field(description="Search-R1 retrieval server, e.g. http://127.0.0.1:8000/retrieve.")
    top_k: int = Field(3, ge=1, le=50, description="Passages returned per search.")
    timeout_s: float = Field(10.0, gt=0, description="Seconds to wait to connect and for each read.")
    max_retries: int = Field(
        3, ge=0, le=20, description="Retries after a connection error, timeout or HTTP 408/429/5xx."
    )
    backoff_s: float = Field(
        0.5, ge=0, le=60, description="Wait before the first retry; it doubles with each further retry."
    )


RetrieverSpec = Annotated[Bm25RetrieverSpec | HttpRetrieverSpec, Field(discriminator="kind")]


class SearchQaEnvSpec(_EnvCommon):
    """Search-R1 protocol: <search>, <information>, <answer>; exact-match reward."""

    kind: Literal["search_qa"] = "search_qa"
    train_data: tuple[str, ...] = Field(
        min_length=1,
        description="JSONL, JSON or parquet files of questions with golden answers (question + "
        "golden_answers/answer/answers/possible_answers, or Search-R1's extra_info/reward_model).",
    )
    eval_data: tuple[str, ...] = Field(min_length=1, description="Held-out question files.")
    retriever: RetrieverSpec
    reward: Literal["em", "f1"] = Field(
        "em",
        description="Reward of the answer: em, exact match 0/1 (Search-R1's); f1, token F1. Success is "
        "exact match either way.",
    )
    max_turns: int = Field(4, ge=1, le=50)
    history_window: int = Field(
        3,
        ge=0,
        le=50,
        description="Past action/observation pairs in the prompt; 3 shows every earlier search of a "
        "4-turn episode, as Search-R1 keeps the whole trajectory in context.",
    )


EnvironmentSpec = Annotated[
    TwxEnvSpec | AlfworldEnvSpec | WebshopEnvSpec | SearchQaEnvSpec, Field(discriminator="kind")
]
