"""Time and token limits of bench episodes. Pure constants; reasons in docs/bench.md.

Kept apart from runner.py so that bench.compare's parser can show them without importing
tau2.
"""

from __future__ import annotations

# Clean mock episodes took 1-2 minutes; one runaway create_task_1 episode held a run for
# 20+ minutes (31 turns at 5 s to 3.5 min per call on a busy 2-core machine).
EPISODE_TIMEOUT_S = 600.0
# Per agent call. llama.cpp's own default is to generate until the context is full.
MAX_TOKENS = 512
# Per agent call, litellm's timeout; within an episode the time left is used if shorter.
CALL_TIMEOUT_S = 900.0
