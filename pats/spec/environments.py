"""Environment sections of the spec, one model per `kind` (a discriminated union).

Each model holds what its environment needs to list and start tasks, and, as class attributes, what pats
must know about the environment before one runs: its instructions, how many tokens a turn adds, whether
its actions are free text, whether it has expert plans. Paths a spec names are made absolute by the
loader (relative to the spec file that names them); `pats validate` also checks that they exist.

Another package adds an environment kind through the entry point group `pats.environments`: the
entry point's name is the kind and its value a subclass of `EnvironmentSection` whose `kind` is
`Literal["<that name>"]`; the module that defines it registers the environment's factory with
`pats.registry.ENVIRONMENTS` (docs/environments.md). Installed plugins join the union below when this
module is first imported.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Union, get_args

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
ALFWORLD_TASK_TYPES: tuple[AlfworldTaskType, ...] = get_args(AlfworldTaskType)

ENTRY_POINT_GROUP = "pats.environments"


class EnvironmentSection(SpecModel):
    """What every environment section has. A subclass sets `kind: Literal["<name>"] = "<name>"` and the
    class attributes below."""

    if TYPE_CHECKING:  # the field each subclass declares (here it would come first in every section)
        kind: str

    INSTRUCTIONS: ClassVar[str] = ""
    """The rules and the answer format the policy reads first (never advice: that is the scaffold's)."""
    TURN_TOKENS: ClassVar[int] = 256
    """Tokens one turn adds to an episode besides the policy's output: the 90th percentile of the
    rendered observation (with the admissible actions, where listed) along expert episodes
    (bench/perf/turn_tokens.py, SmolLM2's tokenizer as a proxy) plus 16 for the chat template's turn markers.
    verl keeps an episode as one growing chat, so its response budget must hold max_turns of these."""
    FREE_TEXT: ClassVar[bool] = False
    """Actions are free text (a query, an answer): the instructions state the answer format, the policy
    must generate, and the environment reads its whole output (`Env.parses_output`)."""
    HAS_EXPERT: ClassVar[bool] = True
    """The environment can give an expert plan for a task (the privileged expert card needs one)."""
    DEFAULT_WINDOW: ClassVar[int] = 2
    """History window when `history_window` is unset: what worked for a 135M policy on TextWorld
    Commonsense (task, last two action/observation pairs, current observation)."""

    @property
    def window(self) -> int:
        """The history window the local backend's prompts show."""
        return self.DEFAULT_WINDOW if self.history_window is None else self.history_window

    max_turns: int = Field(10, ge=1, le=200, description="Turns per episode before it counts as failed.")
    history_window: int | None = Field(
        None,
        ge=0,
        le=50,
        description="Past action/observation pairs the local backend's prompt shows; unset: the "
        "environment's own default (2; search_qa 3). The verl backend keeps the whole episode as one "
        "chat and refuses a value.",
    )
    num_train_tasks: int = Field(1000, ge=1, description="Size of the training task pool.")
    num_eval_tasks: int = Field(128, ge=1, description="Held-out tasks used by evaluation.")


class TwxEnvSpec(EnvironmentSection):
    """TextWorldExpress games (ships its games; needs Java 17)."""

    INSTRUCTIONS: ClassVar[str] = (
        "You are playing a text-based game. Each turn you read what happened and choose one action "
        "that brings you closer to finishing the task. Only the admissible actions work; anything "
        "else wastes a turn."
    )
    TURN_TOKENS: ClassVar[int] = 180  # bench/results/turn_tokens.json

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


class AlfworldEnvSpec(EnvironmentSection):
    """The real ALFWorld TextWorld-PDDL games."""

    # The opening line of verl-agent's ALFWorld prompt (the published GiGPO/GRPO baselines).
    INSTRUCTIONS: ClassVar[str] = (
        "You are an expert agent operating in the ALFRED Embodied Environment, a text-based household "
        "simulation. Each turn you read what happened and choose one action that brings you closer to "
        "finishing the task. Only the admissible actions listed each turn work; anything else wastes a "
        "turn."
    )
    TURN_TOKENS: ClassVar[int] = 248

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


class WebshopEnvSpec(EnvironmentSection):
    """WebShop's text protocol over a product catalog (bm25s search)."""

    INSTRUCTIONS: ClassVar[str] = (
        "You are shopping on a web store for a customer. Each turn you see the current page and act "
        "with search[your query] on a page with a search bar, or click[text] for a button, a product "
        "id or an option value shown on the page; options such as size or colour are chosen by "
        "clicking them on the product page. Clicking buy now ends the episode: the purchase is scored "
        "on the product's type, attributes, chosen options and price against the instruction. Reply "
        "with exactly one action, for example search[red running shoes] or click[buy now], and "
        "nothing else."
    )
    TURN_TOKENS: ClassVar[int] = 245
    FREE_TEXT: ClassVar[bool] = True

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


class SearchQaEnvSpec(EnvironmentSection):
    """Search-R1 protocol: <search>, <information>, <answer>; exact-match reward."""

    INSTRUCTIONS: ClassVar[str] = (
        "Answer the question. You may search a knowledge base as often as you need: write "
        "<search>your query</search> and the top results come back between <information> and "
        "</information>. Each reply is read up to its first <search> or <answer> tag, so search "
        "once per reply. When you know the answer, write it inside <answer> and </answer>, the "
        "answer only, for example <answer>Beijing</answer>; the episode then ends."
    )
    TURN_TOKENS: ClassVar[int] = 532
    FREE_TEXT: ClassVar[bool] = True
    HAS_EXPERT: ClassVar[bool] = False
    # 3 shows every earlier search of a 4-turn episode, as Search-R1 keeps the whole trajectory in context.
    DEFAULT_WINDOW: ClassVar[int] = 3

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


BUILT_IN: tuple[type[EnvironmentSection], ...] = (
    TwxEnvSpec,
    AlfworldEnvSpec,
    WebshopEnvSpec,
    SearchQaEnvSpec,
)


def kind_of(section: type[EnvironmentSection]) -> str | None:
    """The one name a section's `kind: Literal[...]` allows, or None."""
    field = section.model_fields.get("kind")
    names = get_args(field.annotation) if field is not None else ()
    return names[0] if len(names) == 1 and isinstance(names[0], str) else None


def plugin_sections() -> list[type[EnvironmentSection]]:
    """The sections installed packages offer through `pats.environments` entry points. One that cannot
    be loaded or is not a proper section is skipped with a warning that says why (a spec naming it then
    gets the list of known kinds)."""
    taken = {kind_of(s) for s in BUILT_IN}
    found = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        where = f"environment plugin '{ep.name}' ({ep.value})"
        try:
            section = ep.load()
        except Exception as err:  # a broken plugin must not stop the built-in environments
            warnings.warn(f"{where} skipped: it failed to load: {err!r}", stacklevel=2)
            continue
        if not (isinstance(section, type) and issubclass(section, EnvironmentSection)):
            problem = "its value must be a subclass of pats.spec.environments.EnvironmentSection"
        elif kind_of(section) != ep.name:
            problem = (
                f'its class must declare kind: Literal["{ep.name}"] = "{ep.name}" (the entry point name)'
            )
        elif ep.name in taken:
            problem = f"kind '{ep.name}' is already taken"
        else:
            taken.add(ep.name)
            found.append(section)
            continue
        warnings.warn(f"{where} skipped: {problem}", stacklevel=2)
    return found


SECTIONS: dict[str, type[EnvironmentSection]] = {
    kind: s
    for s in (*BUILT_IN, *plugin_sections())
    if (kind := kind_of(s)) is not None  # always: built in, or checked by plugin_sections
}
"""Every environment kind a spec may name: the built-in ones, then installed plugins'."""

if TYPE_CHECKING:  # a type checker cannot know the installed plugins: to it, any section
    EnvironmentSpec = EnvironmentSection
else:
    EnvironmentSpec = Annotated[Union[tuple(SECTIONS.values())], Field(discriminator="kind")]  # noqa: UP007
