"""Benchmarks and the tau2-bench harness for reflexguard."""

import os
import sys

# Both must happen before anything imports tau2 (and litellm through it), and import
# sorting puts third-party imports ahead of any first-party module that could do it.
# litellm would otherwise spend seconds fetching a price map from the internet.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
try:  # tau2 logs through loguru, at DEBUG, from import time on
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("REFLEXGUARD_TAU2_LOG_LEVEL", "ERROR"))
except ImportError:  # the bench extra is not installed; only the overhead bench will work
    pass
