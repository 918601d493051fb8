"""The hostile-schema corpus of the fuzz suite (issue 18). It is defined in
bench/perf/hostile_corpus.py, which the benchmark shares: bench may not import tests."""

from bench.perf.hostile_corpus import ROUTES, Hostile, corpus, reply_body, request_body

__all__ = ["ROUTES", "Hostile", "corpus", "reply_body", "request_body"]
