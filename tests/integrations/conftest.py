"""litellm fetches its model cost map from the network on import unless told not to."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
