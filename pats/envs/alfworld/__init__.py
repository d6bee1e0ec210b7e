"""ALFWorld (`kind: alfworld`): the real TextWorld-PDDL household games. Importing registers it.

- `env`: `AlfworldEnv`, one game process per instance.
- `data`: finding the games ($ALFWORLD_DATA, a folder, or tarballs unpacked to the cache).
- `worker`: the child process script (run by path; it never imports pats).
"""

from pats.envs.alfworld.env import AlfworldEnv, split_intro

__all__ = ["AlfworldEnv", "split_intro"]
