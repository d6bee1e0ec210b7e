"""WebShop behind the `Env` protocol: one shopping episode per instance, over a shared catalog.

The policy writes free text (`parses_output = True`); `step` finds the first `search[...]` or
`click[...]` in it, leniently: inside <action> tags or not, any case of the keyword, quotes and spaces
around the argument. As in WebShop's text environment (`WebAgentTextEnv.step`) the argument is
lower-cased and a click must name something on the page: a button, a product's asin or an option
value. Departures from WebShop: an action it would silently ignore is reported here as invalid, with
the page unchanged and a reason; `search[...]` is accepted only where there is a search bar (WebShop
also searches from other pages); a results page lists `search_results` products (WebShop: 10).

Page transitions follow `SimServer.receive`: search -> results; results -> item (asin), next/prev
page; item -> option (stays), Description/Features (sub page), < Prev (back to the results), Buy Now
(done, reward); sub page -> < Prev (item, options kept); Back to Search from anywhere (options and
query forgotten). The episode's only reward is the purchase's (see reward.py); `won` means 1.0.
"""

from __future__ import annotations

import asyncio
import re

from pats.envs.webshop import pages
from pats.envs.webshop.catalog import Catalog, load_catalog
from pats.envs.webshop.pages import Page
from pats.envs.webshop.reward import get_reward
from pats.envs.webshop.search import ProductSearch, search_index
from pats.errors import SpecError, SpecIssue
from pats.protocols import StepResult
from pats.registry import ENVIRONMENTS
from pats.spec.environments import WebshopEnvSpec
from pats.types import Task

MAX_ARGUMENT_CHARS = 200
_TAG = re.compile(r"<action>(.*?)(?:</action>|$)", re.IGNORECASE | re.DOTALL)
_ACTION = re.compile(r"\b(search|click)\s*\[([^\[\]]*)\]", re.IGNORECASE)
_QUOTES = " \t\n\"'`"


def parse(text: str) -> tuple[str, str] | str:
    """(verb, argument) of the first action in the policy's output, or the reason there is none."""
    if not text.strip():
        return "empty output"
    tag = _TAG.search(text)
    match = _ACTION.search(tag.group(1)) if tag else None
    match = match or _ACTION.search(text)
    if match is None:
        return "no search[...] or click[...] action in the output"
    verb, arg = match.group(1).lower(), " ".join(match.group(2).strip(_QUOTES).split()).lower()
    if not arg:
        return f"{verb}[] is empty: write what to {verb}, e.g. search[red running shoes] or click[buy now]"
    if len(arg) > MAX_ARGUMENT_CHARS:
        return f"over-long {verb} argument ({len(arg)} characters, at most {MAX_ARGUMENT_CHARS})"
    return verb, arg


class WebshopEnv:
    """One WebShop episode at a time."""

    parses_output = True

    def __init__(self, spec: WebshopEnvSpec):
        self.spec = spec
        self._goal_index = -1
        self._page: Page | None = None
        self._last: StepResult | None = None

    @property
    def page(self) -> Page:
        """The page of the episode in play."""
        assert self._page is not None, "reset the environment first"
        return self._page

    @property
    def catalog(self) -> Catalog:
        return load_catalog(self.spec.catalog, self.spec.attributes, self.spec.instructions)

    @property
    def engine(self) -> ProductSearch:
        return search_index(self.catalog)

    def tasks(self, split: str) -> list[Task]:
        """'train' or 'eval': the first num_train_tasks / num_eval_tasks goals of that split."""
        if split not in ("train", "eval"):
            raise ValueError(f"unknown split '{split}'; known: train, eval")
        field = "num_train_tasks" if split == "train" else "num_eval_tasks"
        count, catalog = getattr(self.spec, field), self.catalog
        pool = catalog.split(split)
        if count > len(pool):
            raise SpecError(
                SpecIssue(
                    f"environment.{field}",
                    f"this catalog has {len(pool)} {split} goals; write at most {len(pool)}",
                )
            )
        return [
            Task(
                id=f"webshop:{split}:{i}",
                type=catalog.by_asin[catalog.goals[i].asin].category,
                split=split,
                env="webshop",
                payload={"goal": i, "asin": catalog.goals[i].asin},
            )
            for i in pool[:count]
        ]

    async def reset(self, task: Task) -> StepResult:
        return await asyncio.to_thread(self._reset, task)

    async def step(self, action: str) -> StepResult:
        return await asyncio.to_thread(self._step, action)

    def expert_plan(self, task: Task) -> list[str] | None:
        """Search with the instruction's words (before the price clause), page to the target
        product, click it, click each wanted option, buy. Falls back to searching its title."""
        goal = self.catalog.goals[task.payload["goal"]]
        target = self.catalog.by_asin[goal.asin]
        plan: list[str] = []
        query = goal.instruction.split(", and price lower than")[0]
        ranked = self.engine.search(query)
        if goal.asin not in ranked:
            query = target.title.lower()
            ranked = self.engine.search(query)
        plan.append(f"search[{query}]")
        if goal.asin in ranked:
            plan += ["click[next >]"] * (ranked.index(goal.asin) // self.spec.search_results)
        plan.append(f"click[{goal.asin.lower()}]")
        offered = {v for values in target.options.values() for v in values}
        wanted = [v.strip().replace("/", " | ").lower() for v in goal.options]  # as product options
        plan += [f"click[{v}]" for v in wanted if v in offered]
        return [*plan, "click[buy now]"]

    async def close(self) -> None:
        self._page = None

    # Below: plain functions of the page state, run off the event loop.

    def _reset(self, task: Task) -> StepResult:
        if task.env != "webshop":
            raise ValueError(f"task {task.id} belongs to environment '{task.env}', not 'webshop'")
        goals = self.catalog.goals
        index = int(task.payload["goal"])
        if not 0 <= index < len(goals):
            raise ValueError(f"task {task.id}: goal {index} is not in this catalog ({len(goals)} goals)")
        search_index(self.catalog)  # build the shared index now rather than on the first search
        self._goal_index, self._page = index, Page()
        self._last = self._render()
        return self._last

    def _step(self, action: str) -> StepResult:
        if self._page is None or self._last is None:
            raise RuntimeError("step() called before reset()")
        if self._page.kind == "done":
            raise RuntimeError("step() called after the purchase ended the episode; call reset()")
        parsed = parse(action)
        problem = parsed if isinstance(parsed, str) else self._apply(*parsed)
        if problem:  # the page stays as it was
            return self._last.model_copy(update={"reward": 0.0, "valid": False, "invalid_reason": problem})
        self._last = self._render()
        return self._last

    def _apply(self, verb: str, arg: str) -> str:
        """Carry out one action on the page; returns why it cannot be done ('' when done)."""
        page = self.page
        if verb == "search":
            if page.kind != "search":
                return "there is no search bar on this page; click[back to search] first"
            page.kind, page.query, page.page = "results", arg, 1
            page.results = self.engine.search(arg)
            return ""
        clickable = self._clickables()
        if arg not in clickable:
            known = ", ".join(clickable) or "nothing (use search[...])"
            return f"'{arg}' is not clickable on this page; clickable: {known}"
        target = clickable[arg]
        if target == "back":
            self._page = Page()
        elif target == "next":
            page.page += 1
        elif target == "prev":
            if page.kind == "results":
                page.page -= 1
            elif page.kind == "item":
                page.kind, page.options = "results", {}
            else:
                page.kind = "item"
        elif target == "product":
            page.kind, page.asin, page.options = "item", arg.upper(), {}
        elif target in pages.SUB_PAGES:
            page.kind, page.sub = "sub", target
        elif target == "buy":
            self._buy()
        else:  # an option value: target is the option's name
            page.options[target] = arg
        return ""

    def _clickables(self) -> dict[str, str]:
        """Lower-cased clickable text on the page -> what clicking it does."""
        page = self.page
        out = {} if page.kind == "search" else {pages.BACK_TO_SEARCH.lower(): "back"}
        if page.kind == "results":
            if page.page > 1:
                out[pages.PREV_PAGE.lower()] = "prev"
            if page.page * self.spec.search_results < len(page.results):
                out[pages.NEXT_PAGE.lower()] = "next"
            out.update({asin.lower(): "product" for asin in self._shown()})
        elif page.kind == "item":
            out[pages.PREV_PAGE.lower()] = "prev"
            for name, values in self.catalog.by_asin[page.asin].options.items():
                out.update({v: name for v in values})
            out.update({s.lower(): s for s in pages.SUB_PAGES})
            out[pages.END_BUTTON.lower()] = "buy"
        elif page.kind == "sub":
            out[pages.PREV_PAGE.lower()] = "prev"
        return out

    def _shown(self) -> list[str]:
        n, page = self.spec.search_results, self.page
        return page.results[(page.page - 1) * n : page.page * n]

    def _buy(self) -> None:
        page, catalog = self.page, self.catalog
        goal = catalog.goals[self._goal_index]
        reward, _ = get_reward(catalog.by_asin[page.asin], goal, catalog.by_asin[goal.asin], page.options)
        page.kind, page.reward = "done", reward

    def _render(self) -> StepResult:
        page, catalog = self.page, self.catalog
        instruction = catalog.goals[self._goal_index].instruction
        if page.kind == "search":
            text = pages.search_page(instruction)
        elif page.kind == "results":
            products = [catalog.by_asin[a] for a in self._shown()]
            text = pages.results_page(page, products, self.spec.search_results)
        elif page.kind == "item":
            text = pages.item_page(catalog.by_asin[page.asin])
        elif page.kind == "sub":
            text = pages.sub_page(catalog.by_asin[page.asin], page.sub)
        else:
            text = pages.done_page(catalog.by_asin[page.asin], page.options, page.reward)
            return StepResult(
                observation=text,
                reward=page.reward,
                done=True,
                won=page.reward >= 1.0,
                score=page.reward,
                task_description=instruction,
            )
        admissible = [f"click[{c}]" for c in self._clickables()]
        if page.kind == "search":
            admissible.insert(0, "search[<query>]")
        return StepResult(observation=text, admissible=tuple(admissible), task_description=instruction)


@ENVIRONMENTS.register("webshop")
def make(spec: WebshopEnvSpec) -> WebshopEnv:
    return WebshopEnv(spec)
