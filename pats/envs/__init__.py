"""Built-in environments. Importing this package registers them in `pats.registry.ENVIRONMENTS`.

- `twx`: TextWorldExpress games (`pats.envs.twx.TwxEnv`), the embedded default.
- `pats.envs.prompting`: prompt rendering and action parsing shared by the text environments.
"""

from pats.envs import twx
from pats.envs.prompting import INSTRUCTIONS, PromptParts, instructions, parse_action, render_prompt
from pats.envs.twx import TwxEnv

__all__ = ["INSTRUCTIONS", "PromptParts", "TwxEnv", "instructions", "parse_action", "render_prompt", "twx"]
