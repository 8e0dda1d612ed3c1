"""The dashboard's panels, one function per row (or part of a row), top to bottom: a module per
concern."""

from __future__ import annotations

from collections.abc import Callable

from deploy.monitoring.rows.codec import compression, latency, records
from deploy.monitoring.rows.operations import instances, kafka
from deploy.monitoring.rows.savings import savings_at_a_glance, stored_per_topic
from deploy.monitoring.rows.training import dictionaries_and_training, training_in_the_sidecar
from deploy.monitoring.widgets import Json, Layout


def panels() -> list[Json]:
    """Every panel of the dashboard, laid out and numbered."""
    layout = Layout()
    for row in ROWS:
        row(layout)
    return layout.numbered()


#: The rows, top to bottom.
ROWS: tuple[Callable[[Layout], None], ...] = (
    savings_at_a_glance,
    stored_per_topic,
    compression,
    records,
    latency,
    dictionaries_and_training,
    training_in_the_sidecar,
    kafka,
    instances,
)
