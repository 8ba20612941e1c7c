"""Benchmarks. Run with ``make bench``; results and method are kept in docs/benchmarks.md."""
