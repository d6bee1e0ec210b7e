"""The built-in catalog: a deterministic generator of small WebShop data files.

It writes the three files WebShop itself reads, in their shapes, so the built-in catalog and the real
one load through the same code (`catalog.build_catalog`):
- `items_shuffle` (products: asin, name, pricing "$12.99", customization_options, product_category, ...),
- `items_ins_v2` (asin -> {"attributes": [...]}: the attribute list the reward matches against),
- `items_human_ins` (asin -> [{instruction, instruction_attributes, instruction_options}]: the goals).

300 products in 5 categories x 3 product types, 4 goals each (1200 goals). Category names follow
SkillRL's WebShop bank (apparel, footwear, electronics, beauty_health, home_decor) so its skills map
onto these task types. The texts are built so the reward's substring fallbacks cannot fire by
accident: no option value occurs in any title, bullet point or description, and brands contain no
colour word (WebShop's colour normalization matches substrings).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

SEED = 0
PRODUCTS_PER_TYPE = 20
ATTRIBUTES_PER_PRODUCT = 3
GOALS_PER_PRODUCT = 4
BRANDS = (
    "Northpeak",
    "Veloura",
    "Kestrel",
    "Maplecrest",
    "Orrin",
    "Zephyra",
    "Tallis",
    "Quillon",
    "Harbor",
    "Solvane",
)
FILES = ("items_shuffle_builtin.json", "items_ins_v2_builtin.json", "items_human_ins_builtin.json")

# (category, query, product_category, title noun, attribute pool, options, price range)
# fmt: off
TYPES: tuple[tuple[str, str, str, str, tuple[str, ...], dict[str, tuple[str, ...]], tuple[int, int]], ...] = (
    ("apparel", "t-shirt", "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts", "T-Shirt",
     ("cotton", "short sleeve", "relaxed fit", "moisture wicking", "tagless", "machine wash"),
     {"color": ("black", "white", "olive", "red"), "size": ("small", "medium", "large", "x-large")}, (8, 25)),
    ("apparel", "jeans", "Clothing, Shoes & Jewelry › Women › Clothing › Jeans", "Jeans",
     ("slim fit", "high waist", "stretch fabric", "button closure", "machine wash"),
     {"color": ("indigo", "charcoal", "black"), "size": ("26", "28", "30", "32")}, (25, 70)),
    ("apparel", "winter jacket", "Clothing, Shoes & Jewelry › Women › Clothing › Coats, Jackets & Vests",
     "Winter Jacket", ("water resistant", "hooded", "zipper closure", "fleece lined", "windproof"),
     {"color": ("black", "navy", "burgundy", "camel"), "size": ("small", "medium", "large")}, (45, 150)),
    ("footwear", "running shoes", "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
     "Running Shoes", ("lightweight", "breathable mesh", "non slip", "arch support", "rubber sole"),
     {"color": ("black", "white", "grey", "royal blue"), "size": ("8", "9", "10", "11")}, (40, 120)),
    ("footwear", "hiking boots", "Clothing, Shoes & Jewelry › Men › Shoes › Outdoor › Hiking Boots",
     "Hiking Boots", ("waterproof", "ankle support", "slip resistant", "lace up", "cushioned insole"),
     {"color": ("brown", "black", "khaki"), "size": ("8", "9", "10", "11", "12")}, (60, 160)),
    ("footwear", "slippers", "Clothing, Shoes & Jewelry › Women › Shoes › Slippers", "Slippers",
     ("memory foam", "faux fur", "anti skid", "indoor outdoor", "machine washable"),
     {"color": ("grey", "pink", "beige"), "size": ("small", "medium", "large")}, (12, 40)),
    ("electronics", "wireless earbuds", "Electronics › Headphones, Earbuds & Accessories › Earbuds",
     "Wireless Earbuds", ("noise cancelling", "long battery life", "sweat resistant", "charging case", "touch control"),
     {"color": ("black", "white", "navy")}, (20, 120)),
    ("electronics", "phone case", "Electronics › Cell Phones & Accessories › Cases & Holsters", "Phone Case",
     ("shockproof", "slim design", "raised edges", "card holder", "magsafe compatible"),
     {"color": ("clear", "black", "pink", "midnight green"), "compatible model": ("iphone", "galaxy", "pixel")},
     (8, 30)),
    ("electronics", "bluetooth speaker", "Electronics › Portable Audio & Video › Portable Speakers",
     "Portable Speaker", ("bluetooth", "dustproof", "built in microphone", "stereo sound", "usb charging"),
     {"color": ("black", "red", "teal")}, (25, 150)),
    ("beauty_health", "shampoo", "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
     "Shampoo", ("sulfate free", "paraben free", "cruelty free", "color safe", "for dry hair"),
     {"scent": ("coconut", "lavender", "argan oil", "unscented"), "size": ("8 fl oz", "16 fl oz")}, (6, 30)),
    ("beauty_health", "face moisturizer", "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers",
     "Face Moisturizer", ("fragrance free", "hyaluronic acid", "for sensitive skin", "spf 30", "non comedogenic"),
     {"size": ("1.7 fl oz", "3.4 fl oz")}, (10, 45)),
    ("beauty_health", "deodorant", "Beauty & Personal Care › Personal Care › Deodorants & Antiperspirants",
     "Deodorant", ("aluminum free", "natural ingredients", "long lasting", "vegan", "travel size"),
     {"scent": ("bright citrus", "lavender", "unscented", "cedar"), "size": ("2.6 ounce", "3 ounce")}, (6, 20)),
    ("home_decor", "sheet set", "Home & Kitchen › Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets",
     "Sheet Set", ("deep pocket", "wrinkle free", "cooling", "hypoallergenic", "machine washable"),
     {"color": ("white", "grey", "sage", "navy"), "size": ("twin", "full", "queen", "king")}, (20, 80)),
    ("home_decor", "throw pillow covers", "Home & Kitchen › Home Décor › Decorative Pillows › Throw Pillow Covers",
     "Throw Pillow Covers", ("hidden zipper", "velvet", "double sided", "set of 2", "machine washable"),
     {"color": ("mustard", "teal", "blush pink", "cream"), "size": ("18 x 18 inch", "20 x 20 inch")}, (10, 35)),
    ("home_decor", "table lamp", "Home & Kitchen › Lighting › Lamps & Shades › Table Lamps", "Table Lamp",
     ("dimmable", "usb port", "touch control", "bedside", "modern design"),
     {"color": ("black", "white", "gold")}, (20, 90)),
)
# fmt: on
TEMPLATES = (
    "i need {attrs} {query}{opts}",
    "i am looking for {attrs} {query}{opts}",
    "find me {attrs} {query}{opts}",
)


def generate() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """(items_shuffle, items_ins_v2, items_human_ins), the same on every machine."""
    rng = random.Random(SEED)
    items: list[dict[str, Any]] = []
    attributes: dict[str, Any] = {}
    human: dict[str, Any] = {}
    asins: set[str] = set()
    for category, query, product_category, noun, pool, options, (low, high) in TYPES:
        for _ in range(PRODUCTS_PER_TYPE):
            asin = _asin(rng, asins)
            brand = rng.choice(BRANDS)
            attrs = rng.sample(pool, ATTRIBUTES_PER_PRODUCT)
            values = {name: _subset(rng, choices) for name, choices in options.items()}
            title = f"{brand} {attrs[0].title()} {noun}, {attrs[1].title()}"
            items.append(
                {
                    "asin": asin,
                    "name": title,
                    "category": category,
                    "query": query,
                    "product_category": product_category,
                    "full_description": f"{noun} by {brand}. Made for everyday use.",
                    "small_description": [f"{a.capitalize()}" for a in attrs] + [f"Sold by {brand}"],
                    "pricing": f"${rng.randint(low, high - 1)}.99",
                    "customization_options": {
                        name: [{"value": v, "image": None} for v in vals] for name, vals in values.items()
                    },
                    "images": [""],
                }
            )
            attributes[asin] = {"attributes": attrs}
            human[asin] = [_goal(rng, query, attrs, values) for _ in range(GOALS_PER_PRODUCT)]
    return items, attributes, human


def write_builtin(directory: str | Path) -> tuple[Path, Path, Path]:
    """Write the built-in catalog as WebShop files; returns (items, attributes, instructions) paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    items, attributes, instructions = (directory / name for name in FILES)
    paths = (items, attributes, instructions)
    for path, data in zip(paths, generate(), strict=True):
        path.write_text(json.dumps(data, indent=1))
    return paths


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:  # Amazon-like ids: B0 and 8 upper-case letters or digits
        asin = "B0" + "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", k=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _subset(rng: random.Random, choices: tuple[str, ...]) -> list[str]:
    """At least two of the values, in the type's order (a product offers some of them)."""
    keep = set(rng.sample(choices, rng.randint(2, len(choices))))
    return [c for c in choices if c in keep]


def _goal(rng: random.Random, query: str, attrs: list[str], values: dict[str, list[str]]) -> dict[str, Any]:
    wanted = rng.sample(attrs, rng.randint(1, 2))
    chosen = [rng.choice(vals) for vals in values.values()]
    opts = (", " + " and ".join(chosen)) if chosen else ""
    text = rng.choice(TEMPLATES).format(attrs=" and ".join(wanted), query=query, opts=opts)
    return {"instruction": text, "instruction_attributes": wanted, "instruction_options": chosen}
