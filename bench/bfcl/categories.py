"""Which BFCL categories the bench runs, and the fixed seeded sample of each. No I/O.

`live_*` categories are RESERVED for an independent check (issue 20): the bench refuses
them, so nothing is run or tuned on them by accident.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

DEFAULT_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple",
                      "irrelevance", "multi_turn_base", "multi_turn_miss_func")
# Categories whose cases this harness knows how to run and score (BFCL's non-live,
# non-agentic ones); web_search, memory and format_sensitivity need more than a model.
KNOWN = (*DEFAULT_CATEGORIES, "simple_java", "simple_javascript", "multi_turn_miss_param",
         "multi_turn_long_context")
RESERVED_PREFIX = "live_"
DEFAULT_SEED = 20


class CategoryError(ValueError):
    """A category the bench must not or cannot run."""


def check_categories(names: Sequence[str]) -> list[str]:
    """The categories, validated, in the order given, without repeats."""
    out: list[str] = []
    for name in names:
        if name.startswith(RESERVED_PREFIX):
            raise CategoryError(f"{name}: BFCL's live_* categories are reserved for an "
                                "independent check; the bench does not run them")
        if name not in KNOWN:
            raise CategoryError(f"unknown BFCL category {name!r} "
                                f"(known: {', '.join(KNOWN)})")
        if name not in out:
            out.append(name)
    return out


def _order(case_id: str) -> tuple[str, int]:
    """BFCL's ids end in a number: sort simple_python_10 after simple_python_9."""
    match = re.fullmatch(r"(.*?)_(\d+)", case_id)
    return (match.group(1), int(match.group(2))) if match else (case_id, -1)


def sample(category: str, ids: Sequence[str], limit: int | None, seed: int) -> list[str]:
    """A fixed sample of `limit` ids (all when None or more than there are), in BFCL order.

    Seeded per category, so adding a category or changing another's limit leaves this
    one's sample as it was, and a larger limit keeps every case of a smaller one.
    """
    ordered = sorted(ids, key=_order)
    if limit is None or limit >= len(ordered):
        return ordered
    shuffled = list(ordered)
    random.Random(f"{seed}:{category}").shuffle(shuffled)
    return sorted(shuffled[:limit], key=_order)
