"""The execution environment built here (python -m tools.ee; docs/operator-guide.md §6.1)."""
