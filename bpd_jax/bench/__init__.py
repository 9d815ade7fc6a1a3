"""Decoding benchmarks: `python -m bpd_jax.bench` (see docs/guide/benchmarks.md)."""
