"""WebShop's reward for a purchase: type, attribute, option and price matching.

A port of `get_reward` in web_agent_site/engine/goal.py (princeton-nlp/WebShop) with its helpers
`get_type_reward`, `get_attribute_reward`, `get_option_reward` and `normalize_color`
(engine/normalize.py):

    reward = r_type * (attributes matched + options matched + [price <= limit]) / (|attrs| + |opts| + 1)

Departures, so that it runs without spaCy and thefuzz:
- The title score of `get_type_reward` compares content words (lower-case alphabetic words that are
  not stop words) where WebShop compares spaCy noun/proper-noun tokens. Brands and adjectives
  therefore count too; the thresholds (0.1, 0.2) are WebShop's.
- `token_set_ratio` re-implements thefuzz's (lower-case, non-alphanumerics to spaces, token sets,
  Indel similarity of sorted intersection/remainders, rounded to an integer), in plain Python.
Everything else is as published, including its quirks: size options need an exact match, other
options a fuzzy one (>85, so "12 pack" matches "24 pack"), and an attribute or option also counts when
it occurs as a substring of the title, bullet points or description.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pats.envs.webshop.catalog import Goal, Product

EXACT_MATCH_OPTS = ("size",)
FUZZY_THRESHOLD = 85
# fmt: off
COLOR_SET = (  # engine/normalize.py, in its order (the first colour contained wins)
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream",
    "crystal", "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape",
    "graphite", "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender",
    "lemon", "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint",
    "mocha", "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach",
    "pewter", "pink", "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire",
    "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal",
    "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)
# fmt: on
STOP_WORDS = frozenset("a an and are as at be by for from in is it its of on or the to with without".split())


def get_reward(
    purchased: Product, goal: Goal, target: Product, options: Mapping[str, str]
) -> tuple[float, dict]:
    """(reward, parts) for buying `purchased` with the chosen `options` (option name -> value) when
    the instruction `goal` was written for `target`."""
    r_type, title_score = type_reward(purchased, target)
    attr_matches = attribute_matches(purchased, goal.attributes)
    option_matches = option_matches_of(purchased, goal.options, options)
    r_price = purchased.price <= goal.price_upper if goal.price_upper > 0 else None
    total = (attr_matches + option_matches + (r_price or 0)) / (len(goal.attributes) + len(goal.options) + 1)
    parts = {
        "r_type": r_type,
        "title_score": title_score,
        "attributes": attr_matches,
        "options": option_matches,
        "price_ok": bool(r_price),
    }
    return total * r_type, parts


def type_reward(purchased: Product, target: Product) -> tuple[float, float]:
    """get_type_reward: 1 for the same query, breadcrumb (2+ shared levels) or a similar title;
    0.5 otherwise; 0.1 below title score 0.1; 0 with no title word in common."""
    query_match = purchased.query == target.query
    crumbs_p = {c.strip() for c in purchased.product_category.split("›")}
    crumbs_t = {c.strip() for c in target.product_category.split("›")}
    category_match = len(crumbs_p & crumbs_t) >= 2
    bought, wanted = content_words(purchased.title), content_words(target.title)
    title_score = len(set(bought) & set(wanted)) / len(wanted) if wanted else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, title_score


def attribute_matches(purchased: Product, wanted: Sequence[str]) -> int:
    """get_attribute_reward: a wanted attribute matches a product attribute (token set ratio > 85)
    or occurs in the title, bullet points or description."""
    text = _texts(purchased)
    count = 0
    for attr in wanted:
        if any(token_set_ratio(p, attr) > FUZZY_THRESHOLD for p in purchased.attributes) or attr in text:
            count += 1
    return count


def option_matches_of(purchased: Product, wanted: Sequence[str], chosen: Mapping[str, str]) -> int:
    """get_option_reward: each chosen option that matches a wanted one (size exactly, others by
    token set ratio > 85, both after colour normalization) or occurs in the product's texts."""
    goal_values = [normalize_color(v) for v in wanted]
    text = _texts(purchased)
    count = 0
    for name, value in chosen.items():
        value = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTS:
            matched = value in goal_values
        else:
            matched = any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in goal_values)
        if matched or value in text:
            count += 1
    return count


def normalize_color(value: str) -> str:
    """The first colour of WebShop's list contained in `value` (as a substring), else `value`."""
    return next((c for c in COLOR_SET if c in value), value)


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's token_set_ratio (0-100)."""
    ta, tb = set(_process(a).split()), set(_process(b).split())
    if not ta or not tb:
        return 0
    common = " ".join(sorted(ta & tb))
    only_a = (common + " " + " ".join(sorted(ta - tb))).strip()
    only_b = (common + " " + " ".join(sorted(tb - ta))).strip()
    best = max(_indel_ratio(common, only_a), _indel_ratio(common, only_b), _indel_ratio(only_a, only_b))
    return int(round(100 * best))


def content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if w not in STOP_WORDS and len(w) > 1]


def _texts(product: Product) -> str:
    return "\n".join([product.title, " ".join(product.bullets), product.description]).lower()


def _process(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def _indel_ratio(a: str, b: str) -> float:
    """2 * LCS / (len a + len b): the normalized Indel similarity thefuzz's `ratio` uses."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for ca in a:
        row = [0]
        for j, cb in enumerate(b):
            row.append(prev[j] + 1 if ca == cb else max(prev[j + 1], row[j]))
        prev = row
    return 2 * prev[-1] / (len(a) + len(b))
