"""pats: policy-centric training scaffolds for RL on long-horizon LLM agent tasks.

See docs/ and ../DESIGN in the README for the method. Public entry points:
`pats.spec.load_spec` (YAML -> frozen ExperimentSpec) and the `pats` command line.
"""

__version__ = "0.1.0"
