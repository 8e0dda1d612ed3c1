"""What the `bench` commands share: their round counts and how they print a median."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from typing import Final

from sidecar.cli.common import number

#: Fewer measured rounds and a median says little.
MIN_ROUNDS: Final = 3
#: Counts a flag may give at most: Kafka's partition counts and pids are 32-bit.
MAX_INT32: Final = 2**31 - 1


def rounds(text: str) -> int:
    """`--runs`, `--cost-rounds`: measured rounds, at least `MIN_ROUNDS`."""
    value = number(int, ge=1, le=MAX_INT32)(text)
    if value < MIN_ROUNDS:
        raise argparse.ArgumentTypeError(
            f"expected an integer >= {MIN_ROUNDS}, got {text!r} (the median of fewer runs says "
            "little)"
        )
    return value


def median_range(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    """`median [min-max]` of `values` as the benchmarks print them; `-` for none."""
    if not values:
        return "-"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{fmt.format(mid)} [{fmt.format(low)}-{fmt.format(high)}]"


def fills(text: str) -> tuple[int, ...]:
    """`--fills`: records per batch, a comma list of integers >= 1."""
    fill = number(int, ge=1, le=MAX_INT32)
    try:
        values = tuple(fill(item.strip()) for item in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a comma list of integers >= 1 (records per batch), got {text!r}"
        ) from None
    return values
