"""`python -m bench.report RUN`: rebuild a run's report from its records."""

from bench.report.writer import main

main()
