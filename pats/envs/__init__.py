"""Built-in environments. Importing this package registers them in `pats.registry.ENVIRONMENTS`.

- `twx`: TextWorldExpress games (`pats.envs.twx.TwxEnv`), the embedded default.
- `alfworld`: the real ALFWorld TextWorld-PDDL games (`pats.envs.alfworld.AlfworldEnv`), one game
  process per instance.
- `webshop`: WebShop's shopping protocol over a product catalog (`pats.envs.webshop.WebshopEnv`).
- `search_qa`: search-augmented QA with the Search-R1 protocol (`pats.envs.search_qa.SearchQaEnv`).
- `pats.envs.prompting`: prompt rendering and action parsing shared by the text environments.
"""

from pats.envs import alfworld, search_qa, twx, webshop
from pats.envs.alfworld import AlfworldEnv
from pats.envs.prompting import PromptParts, instructions, parse_action, render_prompt
from pats.envs.search_qa import SearchQaEnv
from pats.envs.twx import TwxEnv
from pats.envs.webshop import WebshopEnv

__all__ = [
    "AlfworldEnv",
    "PromptParts",
    "SearchQaEnv",
    "TwxEnv",
    "WebshopEnv",
    "alfworld",
    "instructions",
    "parse_action",
    "render_prompt",
    "search_qa",
    "twx",
    "webshop",
]
