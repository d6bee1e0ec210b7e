"""`pats sweep`: grids of specs x overrides x seeds, one resumable run per cell (grid.py plans, run.py runs)."""

from pats.sweep.grid import Cell, SweepSpec, cells, load_sweep_file, parse_seeds, sweep_name
from pats.sweep.run import CellResult, finished, run_cell, run_sweep

__all__ = [
    "Cell",
    "CellResult",
    "SweepSpec",
    "cells",
    "finished",
    "load_sweep_file",
    "parse_seeds",
    "run_cell",
    "run_sweep",
    "sweep_name",
]
