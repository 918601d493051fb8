"""Importing tau2 quietly and offline. Import this module before anything from tau2."""

from __future__ import annotations

import os
import sys

# litellm otherwise spends ~10 s fetching a price map from the internet at import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from loguru import logger

logger.remove()
logger.add(sys.stderr, level=os.environ.get("REFLEXGUARD_TAU2_LOG_LEVEL", "ERROR"))
