"""Tests of the harness (runner, oracle, store, reports, CLI) and the graph-break zoo."""
