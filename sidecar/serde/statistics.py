"""The in-process producer's `stats_cb`: librdkafka's statistics handed, parsed once, to the
parts that read them (`output_modes`, `stored`), then to the application's own callback."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

StatsCallback = Callable[[str], None]
#: A reader of one statistics window's `topics` object.
TopicsReader = Callable[[dict[str, Any]], None]


def stats_cb(readers: Sequence[TopicsReader], application: StatsCallback | None) -> StatsCallback:
    """The producer's `stats_cb`: `readers` in order, then the application's own (if any)."""

    def on_stats(stats_json: str) -> None:
        try:
            stats = json.loads(stats_json)
        except ValueError:
            stats = {}
        topics = stats.get("topics", {}) if isinstance(stats, dict) else {}
        for reader in readers:
            reader(topics)
        if application is not None:
            application(stats_json)

    return on_stats
