"""One ALFWorld game in a child process: JSON lines in on stdin, JSON lines out on stdout.

Run by path (`python worker.py`), not as `pats.envs.alfworld.worker`, so the child imports textworld
and alfworld's two wrappers but not pats (nor torch through it). A process per environment because
textworld's PDDL backend is not thread-safe: every game start translates PDDL through
fast_downward.pddl2sas, which sets module-level translator options, rewrites sys.argv and swaps
sys.stdout. It also lets episodes step on several cores at once.

Each game start translates its PDDL twice at load and twice more at every reset (~1.3 s per
translation on a busy core). The worker memoizes `fast_downward.pddl2sas` for the loaded game: the
translation depends only on its text arguments and textworld only reads the task it returns, so a load
plus reset costs two translations instead of four, and a reset of the same game none.

Requests: {"op": "reset", "game": path} (loads the game unless it is already loaded, then restarts it)
and {"op": "step", "action": text}. Each answer is {"observation", "admissible", "won"} or
{"error": message}. The first line written is {"ready": true}, or {"error": ...} when the imports fail.
"""

import json
import os
import sys
import traceback
from typing import Any


def main() -> None:
    # The protocol gets its own copy of stdout; anything the libraries print goes to stderr instead.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        proto.write(json.dumps(message) + "\n")
        proto.flush()

    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    except ImportError as err:
        send({"error": f"{type(err).__name__}: {err}"})
        return
    send({"ready": True})

    import fast_downward

    translate = fast_downward.pddl2sas
    translations: dict[tuple, Any] = {}

    def memoized_pddl2sas(domain, problem, verbose=False, optimize=False):
        key = (domain, problem, optimize)
        if key not in translations:
            if len(translations) >= 4:  # the loaded game's two translations, and the next game's
                translations.clear()
            translations[key] = translate(domain, problem, verbose=verbose, optimize=optimize)
        return translations[key]

    fast_downward.pddl2sas = memoized_pddl2sas  # textworld looks it up on the module at each call

    infos = textworld.EnvInfos(won=True, admissible_commands=True)
    env: Any = None  # textworld's environment of the loaded game (textworld is untyped)
    loaded = None
    for line in sys.stdin:  # ends when the parent closes the pipe or exits
        try:
            request = json.loads(line)
            if request["op"] == "reset":
                if request["game"] != loaded:
                    env, loaded = None, None
                    # The same wrappers as alfworld's AlfredTWEnv (shuffle=False: its eval setting).
                    env = textworld.start(
                        request["game"], infos, [AlfredDemangler(shuffle=False), AlfredInfos]
                    )
                    loaded = request["game"]
                state = env.reset()
            elif request["op"] == "step":
                state, _, _ = env.step(request["action"])
            else:
                raise ValueError(f"unknown op {request['op']!r}")
            send(
                {
                    "observation": state.feedback,
                    "admissible": list(state["admissible_commands"]),
                    "won": bool(state["won"]),
                }
            )
        except Exception as err:  # the game failed, not the process: report and keep serving
            traceback.print_exc()
            send({"error": f"{type(err).__name__}: {err}"})


if __name__ == "__main__":
    main()
