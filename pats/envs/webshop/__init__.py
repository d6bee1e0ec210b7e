"""WebShop (`kind: webshop`): WebShop's text protocol and published reward over a product catalog.

- `env`: `WebshopEnv`, the episode logic and action parsing; importing this package registers it.
- `catalog`: loading WebShop's JSON files (or the built-in catalog) into products and goals.
- `builtin`: the deterministic generator of the small built-in catalog.
- `search`: bm25s product search in place of WebShop's pyserini index.
- `reward`: the port of WebShop's `get_reward`.
- `pages`: the text of each page in WebShop's simple observation mode.
"""

from pats.envs.webshop.env import WebshopEnv, parse

__all__ = ["WebshopEnv", "parse"]
