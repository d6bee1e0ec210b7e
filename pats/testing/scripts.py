"""The repository's scripts without a .py suffix (scripts/mutation, scripts/verl-smoke), imported by
path so tests can call their functions."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """The script at `path` as the module `name`. It is registered in sys.modules before it runs, as
    an import would be: its dataclasses look their module up there."""
    loader = SourceFileLoader(name, str(path))  # no .py suffix: say which loader reads it
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
