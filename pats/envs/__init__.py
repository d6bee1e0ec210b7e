"""Built-in environments. Importing this package registers them in `pats.registry.ENVIRONMENTS`.

- `twx`: TextWorldExpress games (`pats.envs.twx.TwxEnv`), the embedded default.
- `webshop`: WebShop's shopping protocol over a product catalog (`pats.envs.webshop.WebshopEnv`).
- `search_qa`: search-augmented QA with the Search-R1 protocol (`pats.envs.search_qa.SearchQaEnv`).
- `pats.envs.prompting`: prompt rendering and action parsing shared by the text environments.
"""

from pats.envs import search_qa, twx, webshop
from pats.envs.prompting import INSTRUCTIONS, PromptParts, instructions, parse_action, render_prompt
from pats.envs.search_qa import SearchQaEnv
from pats.envs.twx import TwxEnv
from pats.envs.webshop import WebshopEnv

__all__ = [
    "INSTRUCTIONS",
    "PromptParts",
    "SearchQaEnv",
    "TwxEnv",
    "WebshopEnv",
    "instructions",
    "parse_action",
    "render_prompt",
    "search_qa",
    "twx",
    "webshop",
]
