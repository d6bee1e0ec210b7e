"""WebShop: the reward on hand-computed cases, every page transition and bad action, task splits,
catalog loading (built-in and from WebShop-format files), and a scripted expert winning every goal."""

from __future__ import annotations

import json

import pytest

from pats.envs.webshop import WebshopEnv, parse
from pats.envs.webshop.builtin import generate, write_builtin
from pats.envs.webshop.catalog import Goal, Product, build_catalog, load_catalog
from pats.envs.webshop.reward import get_reward, normalize_color, token_set_ratio
from pats.errors import PrerequisiteError, SpecError
from pats.registry import ENVIRONMENTS
from pats.spec.environments import WebshopEnvSpec

BARS = "Grocery & Gourmet Food › Snacks & Sweets › Snack Bars"


def product(**changes) -> Product:
    fields = dict(
        asin="B000000001",
        title="Northpeak Gluten Free Snack Bars",
        category="food",
        query="snack bars",
        product_category=BARS,
        description="Snack bars by Northpeak.",
        bullets=("Gluten free", "High protein", "Low sugar"),
        price_tag="$20.0",
        price=20.0,
        options={"flavor": ("chocolate chip", "mixed berry"), "size": ("12 count", "24 count")},
        attributes=("gluten free", "high protein", "low sugar"),
    )
    return Product(**{**fields, **changes})


GOAL = Goal(
    asin="B000000001",
    instruction="i need gluten free and high protein snack bars, mixed berry and 24 count",
    attributes=("gluten free", "high protein"),
    options=("mixed berry", "24 count"),
    price_upper=30.0,
)
RIGHT = {"flavor": "mixed berry", "size": "24 count"}


# The reward: (attributes matched + options matched + price ok) / (2 + 2 + 1), times r_type.


def test_reward_exact_match_is_one():
    reward, parts = get_reward(product(), GOAL, product(), RIGHT)
    assert reward == 1.0
    assert parts == {"r_type": 1.0, "title_score": 1.0, "attributes": 2, "options": 2, "price_ok": True}


def test_reward_wrong_option_loses_one_fifth():
    reward, parts = get_reward(product(), GOAL, product(), {"flavor": "chocolate chip", "size": "24 count"})
    assert parts["options"] == 1 and reward == pytest.approx(4 / 5)


def test_reward_missing_option_loses_one_fifth():
    assert get_reward(product(), GOAL, product(), {"flavor": "mixed berry"})[0] == pytest.approx(4 / 5)


def test_reward_size_needs_an_exact_match():
    # "24 counts" would pass the fuzzy test (token set ratio 93) but size options compare exactly.
    assert token_set_ratio("24 counts", "24 count") > 85
    reward, parts = get_reward(product(), GOAL, product(), {"flavor": "mixed berry", "size": "24 counts"})
    assert parts["options"] == 1 and reward == pytest.approx(4 / 5)


def test_reward_over_budget_loses_the_price_point():
    dear = product(price=35.0, price_tag="$35.0")
    reward, parts = get_reward(dear, GOAL, product(), RIGHT)
    assert parts["price_ok"] is False and reward == pytest.approx(4 / 5)


def test_reward_missing_attribute():
    plain = product(attributes=("gluten free",), bullets=("Gluten free",))
    assert get_reward(plain, GOAL, product(), RIGHT)[0] == pytest.approx(4 / 5)


def test_reward_attribute_found_fuzzily_or_in_the_texts():
    hyphen = product(attributes=("gluten-free", "high-protein"))  # token set ratio 100
    assert get_reward(hyphen, GOAL, product(), RIGHT)[0] == 1.0
    # No attribute list (WebShop's DUMMY_ATTR), but both attributes occur in title or bullet points.
    texts = product(attributes=("DUMMY_ATTR",), bullets=("High protein",))
    assert get_reward(texts, GOAL, product(), RIGHT)[0] == 1.0


def test_reward_wrong_type_is_zero():
    speaker = product(
        asin="B000000002",
        title="Kestrel Portable Speaker",
        query="bluetooth speaker",
        product_category="Electronics › Portable Audio & Video › Portable Speakers",
        description="A speaker.",
        bullets=("Waterproof",),
        options={},
        attributes=("waterproof",),
    )
    reward, parts = get_reward(speaker, GOAL, product(), {})
    assert parts["r_type"] == 0.0 and parts["title_score"] == 0.0 and reward == 0.0


def test_reward_weak_type_match_halves():
    # Shares one of the target title's five content words (northpeak gluten free snack bars): title
    # score 0.2, not above 0.2, and neither query nor category matches -> r_type 0.5. Only the price
    # point is earned: 0.5 * 1/5.
    speaker = product(
        title="Northpeak Portable Speaker",
        query="bluetooth speaker",
        product_category="Electronics › Portable Speakers",
        description="A speaker.",
        bullets=(),
        options={},
        attributes=("waterproof",),
    )
    reward, parts = get_reward(speaker, GOAL, product(), {})
    assert parts["title_score"] == pytest.approx(0.2) and parts["r_type"] == 0.5
    assert reward == pytest.approx(0.1)


def test_reward_helpers_match_webshop():
    # WebShop's own normalize_color cases (its test suite), and thefuzz's quirk that "12 pack"
    # matches "24 pack" (so only size options need the exact match).
    for text, expected in [
        ("", ""),
        ("black forest", "black"),
        ("violet lavender", "lavender"),
        ("123alabaster", "alabaster"),
        ("webshop", "webshop"),
    ]:
        assert normalize_color(text) == expected
    assert token_set_ratio("12 pack", "24 pack") == 86
    assert token_set_ratio("Gluten-Free", "gluten free snack") == 100
    assert token_set_ratio("black", "white") == 0


# Action parsing: lenient on form, strict on content.


@pytest.mark.parametrize(
    "text, expected",
    [
        ("search[red shoes]", ("search", "red shoes")),
        ("<action>Click[ Buy Now ]</action>", ("click", "buy now")),
        ("I think so.\nAction: SEARCH[ 'gluten free bars' ]", ("search", "gluten free bars")),
        ("<action>click[b0abc]</action> then click[buy now]", ("click", "b0abc")),
        ('click["< Prev"]', ("click", "< prev")),
    ],
)
def test_parse_finds_the_action(text, expected):
    assert parse(text) == expected


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty output"),
        ("   \n", "empty output"),
        ("%%%% ?? !!", "no search[...] or click[...] action"),
        ("buy[the shoes]", "no search[...] or click[...] action"),
        ("search red shoes", "no search[...] or click[...] action"),
        ("search[]", "search[] is empty"),
        ("search[" + "shoes " * 60 + "]", "over-long search argument"),
    ],
)
def test_parse_rejects_bad_output(text, reason):
    result = parse(text)
    assert isinstance(result, str) and result.startswith(reason)


# Episodes on the built-in catalog.


@pytest.fixture
def env():
    return WebshopEnv(WebshopEnvSpec())


def first_task_of(env, asin_options: int = 2):
    """An eval task whose product has `asin_options` option kinds and at least 11 search results."""
    for task in env.tasks("eval"):
        goal = env.catalog.goals[task.payload["goal"]]
        if len(env.catalog.by_asin[goal.asin].options) == asin_options:
            return task
    raise AssertionError("no such task")


async def test_page_transitions(env):
    task = first_task_of(env)
    goal = env.catalog.goals[task.payload["goal"]]
    start = await env.reset(task)
    assert start.observation == f"WebShop [SEP] Instruction: [SEP] {goal.instruction} [SEP] Search"
    assert start.admissible == ("search[<query>]",) and start.task_description == goal.instruction

    query = env.catalog.by_asin[goal.asin].query
    results = await env.step(f"search[{query}]")
    assert results.valid and results.reward == 0.0 and not results.done
    assert results.observation.startswith("Back to Search [SEP] Page 1 (Total results: ")
    shown = [a for a in results.admissible if a.startswith("click[b0")]
    assert len(shown) == 10 and results.admissible[:2] == ("click[back to search]", "click[next >]")

    page2 = await env.step("click[next >]")
    assert "Page 2" in page2.observation and "click[< prev]" in page2.admissible
    assert not set(shown) & set(page2.admissible)
    back = await env.step("click[< prev]")
    assert back.observation == results.observation

    asin = shown[0][len("click[") : -1]
    item = await env.step(f"click[{asin}]")
    product = env.catalog.by_asin[asin.upper()]
    assert item.observation.startswith("Back to Search [SEP] < Prev [SEP] ")
    assert item.observation.endswith(
        f"{product.title} [SEP] Price: {product.price_tag} [SEP] Description [SEP] Features [SEP] Buy Now"
    )
    name, values = next(iter(product.options.items()))
    assert f"click[{values[1]}]" in item.admissible and "click[buy now]" in item.admissible

    chosen = await env.step(f"click[{values[1]}]")
    assert chosen.valid and chosen.observation == item.observation  # simple mode shows no selection
    assert env._page.options == {name: values[1]}

    desc = await env.step("click[description]")
    assert desc.observation == f"Back to Search [SEP] < Prev [SEP] {product.description}"
    item_again = await env.step("click[< prev]")
    assert item_again.observation == item.observation and env._page.options == {name: values[1]}
    features = await env.step("click[Features]")
    assert features.observation == " [SEP] ".join(["Back to Search", "< Prev", *product.bullets])
    await env.step("click[< prev]")

    to_results = await env.step("click[< prev]")  # item -> the results page it came from
    assert to_results.observation == results.observation and env._page.options == {}

    await env.step(f"click[{asin}]")
    to_search = await env.step("click[back to search]")
    assert to_search.observation == start.observation and to_search.admissible == ("search[<query>]",)


async def test_buying_ends_the_episode_with_the_reward(env):
    task = first_task_of(env)
    plan = env.expert_plan(task)
    await env.reset(task)
    for action in plan[:-1]:
        assert (await env.step(action)).valid
    done = await env.step(plan[-1])
    assert done.done and done.won and done.reward == 1.0 and done.score == 1.0 and done.admissible == ()
    assert done.observation.startswith(
        f"Thank you for shopping with us! [SEP] Purchased [SEP] {task.payload['asin']}"
    )
    assert done.observation.endswith("Your score (min 0.0, max 1.0) [SEP] 1.00")
    with pytest.raises(RuntimeError, match="call reset"):
        await env.step("click[back to search]")


async def test_buying_without_the_options_scores_less(env):
    task = first_task_of(env)
    goal = env.catalog.goals[task.payload["goal"]]
    plan = [
        a for a in env.expert_plan(task) if a.startswith(("search", "click[next", "click[b0", "click[buy"))
    ]
    await env.reset(task)
    for action in plan:
        result = await env.step(action)
    n_attrs = len(goal.attributes)
    expected = (n_attrs + 0 + 1) / (n_attrs + len(goal.options) + 1)
    assert result.done and not result.won and result.reward == pytest.approx(expected)


@pytest.mark.parametrize(
    "page, action, reason",
    [
        ("search", "click[buy now]", "'buy now' is not clickable on this page; clickable: nothing"),
        ("search", "click[search]", "'search' is not clickable"),
        ("results", "search[shoes]", "there is no search bar on this page"),
        ("results", "click[< prev]", "'< prev' is not clickable"),  # page 1 has no previous page
        (
            "results",
            "click[b0nothere1]",
            "'b0nothere1' is not clickable on this page; clickable: back to search",
        ),
        ("item", "click[purple polka dots]", "'purple polka dots' is not clickable"),
        ("item", "search[more shoes]", "there is no search bar"),
        ("item", "", "empty output"),
        ("item", "I would buy it", "no search[...] or click[...] action"),
        ("item", "click[" + "x" * 300 + "]", "over-long click argument"),
    ],
)
async def test_bad_actions_leave_the_page_unchanged(env, page, action, reason):
    task = first_task_of(env)
    goal = env.catalog.goals[task.payload["goal"]]
    before = await env.reset(task)
    if page != "search":
        before = await env.step(f"search[{env.catalog.by_asin[goal.asin].query}]")
    if page == "item":
        before = await env.step(next(a for a in before.admissible if a.startswith("click[b0")))
    result = await env.step(action)
    assert not result.valid and result.invalid_reason.startswith(reason)
    assert result.observation == before.observation and result.admissible == before.admissible
    assert result.reward == 0.0 and not result.done
    assert (await env.step(before.admissible[-1].replace("<query>", "shoes"))).valid  # still playable


async def test_search_without_matches_shows_an_empty_page(env):
    await env.reset(env.tasks("eval")[0])
    empty = await env.step("search[zzzqqq xyzzy]")
    assert empty.valid and empty.observation == "Back to Search [SEP] Page 1 (Total results: 0)"
    assert empty.admissible == ("click[back to search]",)


async def test_step_before_reset_and_foreign_task(env):
    with pytest.raises(RuntimeError, match="before reset"):
        await env.step("search[x]")
    foreign = env.tasks("eval")[0].model_copy(update={"env": "twx"})
    with pytest.raises(ValueError, match="not 'webshop'"):
        await env.reset(foreign)


# Tasks and catalogs.


def test_tasks_are_fixed_disjoint_and_typed_by_category(env):
    train, evals = env.tasks("train"), env.tasks("eval")
    assert (len(train), len(evals)) == (1000, 128)
    assert not {t.payload["goal"] for t in train} & {t.payload["goal"] for t in evals}
    assert {t.type for t in train} == {"apparel", "footwear", "electronics", "beauty_health", "home_decor"}
    assert all(t.env == "webshop" and t.id == f"webshop:{t.split}:{t.payload['goal']}" for t in train + evals)
    # Pinned: the same goals on every machine (seeded generator and shuffle, no process-wide random).
    assert evals[0].payload == {"goal": 0, "asin": "B0FXFF42D1"} and evals[0].type == "beauty_health"
    assert train[0].payload == {"goal": 200, "asin": "B0ZYEUXLB6"} and train[0].type == "electronics"
    small = WebshopEnv(WebshopEnvSpec(num_train_tasks=5, num_eval_tasks=3))
    assert [t.id for t in small.tasks("train")] == [t.id for t in train[:5]]
    assert len(small.tasks("eval")) == 3
    with pytest.raises(ValueError, match="known: train, eval"):
        env.tasks("dev")
    with pytest.raises(
        SpecError, match="environment.num_eval_tasks: this catalog has 200 eval goals; write at most 200"
    ):
        WebshopEnv(WebshopEnvSpec(num_eval_tasks=201)).tasks("eval")


def test_builtin_catalog_is_consistent():
    catalog = load_catalog(None, None, None)
    assert len(catalog.products) == 300 and len(catalog.goals) == 1200
    for p in catalog.products:
        texts = "\n".join([p.title, *p.bullets, p.description]).lower()
        for values in p.options.values():
            for value in values:  # the reward's substring fallback must not credit a wrong option
                assert normalize_color(value) not in texts, (p.asin, value)
    for goal in catalog.goals:
        target = catalog.by_asin[goal.asin]
        assert set(goal.attributes) <= set(target.attributes)
        assert len(goal.options) == len(target.options)
        assert target.price < goal.price_upper <= target.price + 40
        assert goal.instruction.endswith(f", and price lower than {goal.price_upper:.2f} dollars")


async def test_expert_wins_every_goal_of_the_builtin_catalog(env):
    rewards = []
    for task in env.tasks("train") + env.tasks("eval"):
        await env.reset(task)
        for action in env.expert_plan(task):
            result = await env.step(action)
            assert result.valid, (task.id, action, result.invalid_reason)
        rewards.append(result.reward)
    assert len(rewards) == 1128 and set(rewards) == {1.0}


async def test_webshop_files_load_through_the_same_path(tmp_path):
    items, attrs, human = write_builtin(tmp_path)
    assert json.loads(items.read_text())[0]["pricing"].startswith("$")
    spec = WebshopEnvSpec(
        catalog=str(items), attributes=str(attrs), instructions=str(human), num_eval_tasks=20
    )
    from_files, builtin = WebshopEnv(spec), WebshopEnv(WebshopEnvSpec(num_eval_tasks=20))
    assert from_files.catalog is not builtin.catalog and from_files.catalog == builtin.catalog
    assert from_files.tasks("eval") == builtin.tasks("eval")
    task = from_files.tasks("eval")[3]
    await from_files.reset(task)
    for action in from_files.expert_plan(task):
        result = await from_files.step(action)
    assert result.won


def test_raw_webshop_product_fields():
    raw = {
        "asin": "B07ABCDEFG",
        "name": "Linen Shirt",
        "category": "fashion",
        "query": " Shirts ",
        "product_category": "Clothing › Men",
        "full_description": "",
        "small_description": "Soft",
        "pricing": "$10.00 - $15.00",
        "images": [""],
        "customization_options": {"Color": [{"value": "Navy/White", "image": None}], "Size": None},
    }
    skipped = dict(raw, asin="nan")
    human = {
        "B07ABCDEFG": [
            {
                "instruction": "i want a linen shirt.",
                "instruction_attributes": ["linen"],
                "instruction_options": ["navy | white"],
            },
            {"instruction": "no attributes", "instruction_attributes": [], "instruction_options": []},
        ]
    }
    catalog = build_catalog([raw, skipped, raw], {}, human)
    (p,) = catalog.products
    assert p.options == {"color": ("navy | white",)} and p.query == "shirts" and p.bullets == ("Soft",)
    assert p.price_tag == "$10.0 to $15.0" and 10.0 <= p.price <= 15.0 and p.attributes == ("DUMMY_ATTR",)
    (goal,) = catalog.goals  # the goal without attributes is skipped, as WebShop does
    assert goal.instruction.startswith("i want a linen shirt, and price lower than ")
    assert goal.price_upper in (20.0, 30.0, 40.0, 50.0) and goal.options == ("navy | white",)


def test_missing_or_half_configured_files_name_the_fix(tmp_path):
    missing = WebshopEnv(
        WebshopEnvSpec(catalog=str(tmp_path / "items_shuffle.json"), instructions=str(tmp_path / "h.json"))
    )
    with pytest.raises(
        PrerequisiteError, match=r"environment.catalog: .*items_shuffle.json does not exist; .*setup.sh"
    ):
        missing.tasks("train")
    half = WebshopEnv(WebshopEnvSpec(catalog=str(tmp_path / "items_shuffle.json")))
    with pytest.raises(PrerequisiteError, match="environment.instructions is unset"):
        half.tasks("train")
    (tmp_path / "bad.json").write_text("{not json")
    bad = WebshopEnv(
        WebshopEnvSpec(catalog=str(tmp_path / "bad.json"), instructions=str(tmp_path / "bad.json"))
    )
    with pytest.raises(PrerequisiteError, match="not valid JSON"):
        bad.tasks("eval")


def test_registered_and_free_text(env):
    assert ENVIRONMENTS.get("webshop")(WebshopEnvSpec()).parses_output is True
    items, attributes, human = generate()
    assert items[0]["asin"] == "B041QJTP2L" and len(items) == len(attributes) == len(human) == 300
