"""Benchmarks and the tau2-bench harness for reflexguard."""

import os

# Set before anything imports litellm (through tau2): otherwise litellm spends seconds
# fetching a price map from the internet. Here, because import sorting puts third-party
# imports ahead of any first-party module that could set it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
