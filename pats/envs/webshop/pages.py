"""The pages of the WebShop site as text, in WebShop's `simple` text observation mode.

WebShop renders HTML and its text environment (web_agent_site/envs/web_agent_text_env.py,
`convert_html_to_text(simple=True)`) joins the visible strings with " [SEP] ". These functions write
the same strings directly. Departures: the instruction is shown on the search page only (the prompt
carries it as the task description already, and repeating it on every page costs tokens, as in
ReAct's WebShop prompts); item pages have no Rating line and no Reviews button (no reviews are
loaded); the done page shows the score without WebShop's MTurk code.

Button labels are WebShop's (engine.py): "Back to Search", "< Prev", "Next >", "Description",
"Features", "Buy Now"; a results page links each product by its asin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pats.envs.webshop.catalog import Product

SEP = " [SEP] "
BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, END_BUTTON = "Back to Search", "< Prev", "Next >", "Buy Now"
SUB_PAGES = ("Description", "Features")


@dataclass
class Page:
    """Where the shopper is: the page kind and what it shows."""

    kind: str = "search"  # search | results | item | sub | done
    query: str = ""
    results: list[str] = field(default_factory=list)  # asins of the last search, best first
    page: int = 1  # results page number
    asin: str = ""  # the product open on item and sub pages
    options: dict[str, str] = field(default_factory=dict)  # option name -> chosen value
    sub: str = ""  # Description or Features
    reward: float = 0.0


def search_page(instruction: str) -> str:
    return SEP.join(["WebShop", "Instruction:", instruction, "Search"])


def results_page(page: Page, products: list[Product], per_page: int) -> str:
    parts = [BACK_TO_SEARCH, f"Page {page.page} (Total results: {len(page.results)})"]
    if page.page > 1:
        parts.append(PREV_PAGE)
    if page.page * per_page < len(page.results):
        parts.append(NEXT_PAGE)
    for p in products:
        parts += [p.asin, p.title, p.price_tag]
    return SEP.join(parts)


def item_page(product: Product) -> str:
    parts = [BACK_TO_SEARCH, PREV_PAGE]
    for name, values in product.options.items():
        parts += [name, *values]
    parts += [product.title, f"Price: {product.price_tag}", *SUB_PAGES, END_BUTTON]
    return SEP.join(parts)


def sub_page(product: Product, sub: str) -> str:
    if sub == "Description":
        body = [product.description or "No Description"]
    else:
        body = list(product.bullets) or ["No Features"]
    return SEP.join([BACK_TO_SEARCH, PREV_PAGE, *body])


def done_page(product: Product, options: dict[str, str], reward: float) -> str:
    chosen = ", ".join(f"{k}: {v}" for k, v in options.items()) or "none"
    return SEP.join(
        [
            "Thank you for shopping with us!",
            "Purchased",
            product.asin,
            f"options: {chosen}",
            "Your score (min 0.0, max 1.0)",
            f"{reward:.2f}",
        ]
    )
