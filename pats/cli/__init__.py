"""The `pats` command line."""
