"""Benchmarks and the tau2-bench harness for reflexguard."""
