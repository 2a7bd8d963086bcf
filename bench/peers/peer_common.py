"""What the peer scripts of bench/peers share: percentiles computed exactly as
bench/common/peer.cc computes cohort's, and flag parsing helpers.

A peer's figures are compared with cohort's in one ratio line, so both sides
must pick the same sample for the same percentile.
"""

import math


def percentile(values, p):
    """Nearest rank on n - 1, rounded half away from zero: the rank
    std::lround picks in bench/common/peer.cc's Percentile (Python's round()
    rounds halves to even, which picks another sample for, e.g., the p50 of
    six values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = int(math.floor(p / 100.0 * (len(ordered) - 1) + 0.5))
    return ordered[min(len(ordered) - 1, max(0, k))]


def int_list(text):
    """"2,8,32" -> [2, 8, 32] (empty items ignored)."""
    return [int(x) for x in text.split(",") if x]
