"""Products and goals of a WebShop catalog, loaded once per process and shared by every env instance.

`build_catalog` follows WebShop's own loading (web_agent_site/engine/engine.py `load_products` and
`generate_product_prices`, engine/goal.py `get_human_goals`, envs/web_agent_text_env.py `SimServer`):
products with a bad or repeated asin are skipped, option values are lower-cased with '/' -> ' | ',
a price range is sampled uniformly, a goal's price limit is the larger of two of the next four
multiples of 10 above the price, goals without attributes are skipped, and the goal list is shuffled
with seed 233. Departures: every random draw uses a generator seeded by the asin (WebShop uses the
process-wide `random`), so prices, limits and goal order are the same on every machine; reviews and
images are not loaded.

Splits: with 2000 goals or more (the real files), `eval` is WebShop's test split (goals 0-499 after
the shuffle) and `train` starts at goal 1500 (goals 500-1499 are WebShop's dev split, left unused);
a smaller catalog (the built-in one) holds out its first sixth.
"""

from __future__ import annotations

import json
import random
import re
import threading
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from pats.errors import PrerequisiteError

PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # WebShop's goal price limits
NO_PRICE_LIMIT = 1000000.0
GOAL_SHUFFLE_SEED = 233  # WebShop's SimServer seed
WEBSHOP_TEST, WEBSHOP_TRAIN_START = 500, 1500  # WebShop's published goal split
DOWNLOAD_HINT = (
    "get WebShop's data with its setup.sh (https://github.com/princeton-nlp/WebShop: "
    "`./setup.sh -d all` or `-d small`), or leave environment.catalog unset for the built-in catalog"
)


@dataclass(frozen=True)
class Product:
    asin: str
    title: str
    category: str  # WebShop's top-level category; the task type
    query: str  # the search query the product was scraped under
    product_category: str  # breadcrumb, '›'-separated
    description: str
    bullets: tuple[str, ...]
    price_tag: str  # as shown: "$12.99" or "$10.0 to $15.0"
    price: float  # the price the reward compares with the limit
    options: dict[str, tuple[str, ...]] = field(hash=False)  # option name -> values
    attributes: tuple[str, ...]


@dataclass(frozen=True)
class Goal:
    asin: str  # the product the instruction was written for
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]  # wanted option values
    price_upper: float


@dataclass(frozen=True)
class Catalog:
    products: tuple[Product, ...]
    goals: tuple[Goal, ...]  # in WebShop's shuffled order
    by_asin: dict[str, Product] = field(hash=False)

    def split(self, name: str) -> range:
        """Goal indices of 'train' or 'eval' (see the module docstring)."""
        n = len(self.goals)
        if n >= WEBSHOP_TRAIN_START + WEBSHOP_TEST:
            return range(0, WEBSHOP_TEST) if name == "eval" else range(WEBSHOP_TRAIN_START, n)
        held = n // 6
        return range(0, held) if name == "eval" else range(held, n)


def build_catalog(items: list[dict[str, Any]], attributes: dict[str, Any], human: dict[str, Any]) -> Catalog:
    """A catalog from WebShop's three files as parsed JSON (items_shuffle, items_ins_v2,
    items_human_ins)."""
    products: list[Product] = []
    seen: set[str] = set()
    for raw in items:
        asin = str(raw.get("asin", ""))
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue  # as load_products
        seen.add(asin)
        products.append(_product(raw, attributes.get(asin) or {}))
    by_asin = {p.asin: p for p in products}

    goals: list[Goal] = []
    for product in products:
        for k, entry in enumerate(human.get(product.asin) or []):
            attrs = tuple(entry.get("instruction_attributes") or ())
            if not attrs:
                continue  # get_human_goals skips these
            options = entry.get("instruction_options") or []
            if isinstance(options, dict):
                options = list(options.values())
            upper = _price_upper(product, k)
            text = str(entry["instruction"]).strip().strip(".")
            if upper != NO_PRICE_LIMIT:
                text += f", and price lower than {upper:.2f} dollars"
            goals.append(Goal(product.asin, text, attrs, tuple(str(o) for o in options), upper))
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return Catalog(tuple(products), tuple(goals), by_asin)


_CACHE: dict[tuple[str, ...], Catalog] = {}
_LOCK = threading.Lock()


def load_catalog(catalog: str | None, attributes: str | None, instructions: str | None) -> Catalog:
    """The catalog for these spec paths (None: the built-in one), built once per process."""
    if catalog is None and instructions is None:
        key: tuple[str, ...] = ("builtin",)
    elif catalog is None or instructions is None:
        missing = "catalog" if catalog is None else "instructions"
        raise PrerequisiteError(
            f"environment.{missing} is unset but the other WebShop file is set: set environment.catalog "
            "to items_shuffle*.json and environment.instructions to items_human_ins.json (and "
            "environment.attributes to items_ins_v2*.json), or unset both for the built-in catalog"
        )
    else:
        key = tuple(str(Path(p).resolve()) if p else "" for p in (catalog, attributes, instructions))
    with _LOCK:  # one build per process, even when many env instances start at once
        if key not in _CACHE:
            if key == ("builtin",):
                from pats.envs.webshop.builtin import generate

                _CACHE[key] = build_catalog(*generate())
            else:
                items = _read(catalog, "catalog")
                attrs = _read(attributes, "attributes") if attributes else {}
                _CACHE[key] = build_catalog(items, attrs, _read(instructions, "instructions"))
        return _CACHE[key]


def _read(path: str | None, field_name: str) -> Any:
    file = Path(str(path)).expanduser()
    if not file.is_file():
        raise PrerequisiteError(f"environment.{field_name}: {file} does not exist; {DOWNLOAD_HINT}")
    try:
        return json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PrerequisiteError(f"environment.{field_name}: {file} is not valid JSON ({err})") from None


def _product(raw: dict[str, Any], attrs: dict[str, Any]) -> Product:
    asin = str(raw["asin"])
    prices = _prices(raw.get("pricing"))
    if len(prices) == 1:
        tag, price = f"${prices[0]}", prices[0]
    else:  # generate_product_prices: uniform in the range (seeded here by the asin)
        tag, price = f"${prices[0]} to ${prices[1]}", random.Random(asin).uniform(prices[0], prices[1])
    options: dict[str, tuple[str, ...]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents:
            options[name.lower()] = tuple(
                str(c["value"]).strip().replace("/", " | ").lower() for c in contents
            )
    bullets = raw.get("small_description") or []
    return Product(
        asin=asin,
        title=str(raw.get("name", "")),
        category=str(raw.get("category", "")),
        query=str(raw.get("query", "")).lower().strip(),
        product_category=str(raw.get("product_category", "")),
        description=str(raw.get("full_description") or ""),
        bullets=tuple(bullets) if isinstance(bullets, list) else (str(bullets),),
        price_tag=tag,
        price=price,
        options=options,
        # WebShop gives products without an attribute entry a placeholder that never matches.
        attributes=tuple(attrs.get("attributes") or ("DUMMY_ATTR",)),
    )


def _prices(pricing: Any) -> list[float]:
    """load_products: '$12.99' -> [12.99]; '$10.00 - $15.00' -> [10.0, 15.0]; none -> [100.0]."""
    if not pricing:
        return [100.0]
    out = []
    for part in str(pricing).split("$")[1:]:
        try:
            out.append(float(Decimal(re.sub(r"[^\d.]", "", part))))
        except InvalidOperation:
            continue
    return out[:2] or [100.0]


def _price_upper(product: Product, k: int) -> float:
    """get_human_goals: the larger of two of the next four multiples of 10 above the price."""
    above = [p for p in PRICE_RANGE if p > product.price][:4]
    if len(above) < 2:
        return NO_PRICE_LIMIT
    return max(random.Random(f"{product.asin}:{k}").sample(above, 2))
