"""Dictionaries to publish in the registry tests' own registry topics: one trained content under
many ids, so that their bytes differ (the embedded id), quickly."""

from __future__ import annotations

import zstandard

from sidecar.bench.events import generate
from sidecar.dictionaries.model import Dictionary, TrainingSample, build_dictionary

NAMESPACE = "scale"


def dictionaries(count: int, namespace: str = NAMESPACE) -> list[Dictionary]:
    """`count` dictionaries of `namespace`, ids 32768 and up, versions 1 and up."""
    events = list(generate("order", 3_000, seed=5))
    trained = zstandard.train_dictionary(16_384, list(events)).as_bytes()
    return [
        build_dictionary(
            namespace,
            trained,
            dict_id=32_767 + version,
            version=version,
            level=3,
            heldout_ratio=2.0,
            nodict_ratio=1.0,
            break_even_size=0,
            training=TrainingSample(count=1, bytes=1, heldout_count=1, heldout_bytes=1),
        )
        for version in range(1, count + 1)
    ]
