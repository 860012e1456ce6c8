"""Benchmarks (scripts, not tests): ``python -m harness.bench.cpu``."""
