"""Benchmarks (scripts, not tests): ``python -m compiler.bench.cpu``."""
