"""The proxy's frames-or-raw rule (`proxy.batch_choice`): the crossover it reads is measured on
the topic's latest values, frames at the level the proxy writes the topic's batches at, and
measured again, at the new dictionary's level, once the active dictionary changes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from sidecar.codec import Encoder
from sidecar.metrics import Metrics
from sidecar.namespaces import Namespace
from sidecar.proxy.batch_choice import COMPARE_ABOVE, COMPARE_FROM, RAW_FROM, FramesOrRaw
from sidecar.record_batch import producer_zstd
from sidecar.training.crossover import raw_crossovers
from tests.unit.dictionaries import AddDictionary

HEADER_KEY = "zd"


def _expected(encoder: Encoder, values: list[bytes], level: int) -> float | None:
    """The crossover of `values` with `encoder`'s frames compressed at zstd `level`, the raw
    values at producers' default (3): a client's batch passed as it came keeps its level."""
    frames = [
        (e.value or b"", e.headers or ()) for e in encoder.encode_batch([(v, None) for v in values])
    ]
    return raw_crossovers(
        values, frames, {"zstd": producer_zstd(level)}, raw_codecs={"zstd": producer_zstd(3)}
    )["zstd"]


def test_the_crossover_is_measured_at_the_dictionarys_batch_level_and_again_when_it_changes(
    add_dictionary: AddDictionary, events: list[bytes]
) -> None:
    values = events[4000:5024]
    at_three = Encoder(add_dictionary("orders", batch_level=3), header_key=HEADER_KEY)
    at_twelve = Encoder(add_dictionary("orders", batch_level=12), header_key=HEADER_KEY)
    expected = {3: _expected(at_three, values, 3), 12: _expected(at_twelve, values, 12)}
    assert expected[3] is not None and expected[12] is not None
    assert expected[3] != expected[12]  # the level moves it: the test tells them apart
    namespace = Namespace(
        "orders", at_three, None, Metrics(CollectorRegistry()).namespace("orders")
    )
    rule = FramesOrRaw("zstd", clock=lambda: 0.0)
    assert not rule.update(namespace, [values]), "nothing measured before: nothing moved"
    rule.update(namespace, [])
    assert rule.crossover == expected[3]
    namespace.encoder = at_twelve  # another dictionary became active
    assert rule.update(namespace, [])
    assert rule.crossover == expected[12]
    assert rule.raw_from == expected[12] * RAW_FROM
    assert rule.compare_from == max(COMPARE_FROM, expected[12] * COMPARE_ABOVE)


def test_with_raw_values_off_every_batch_is_written_as_frames(
    add_dictionary: AddDictionary, events: list[bytes]
) -> None:
    encoder = Encoder(add_dictionary("orders"), header_key=HEADER_KEY)
    namespace = Namespace("orders", encoder, None, Metrics(CollectorRegistry()).namespace("orders"))
    rule = FramesOrRaw("zstd", raw=False)
    for _ in range(2):
        assert not rule.update(namespace, [events[:1024]])
    assert (rule.crossover, rule.raw_from, rule.compare_from) == (None, None, None)


def test_a_crossover_is_logged_when_first_measured_and_when_it_moved_a_tenth() -> None:
    rule = FramesOrRaw("zstd")
    logged: list[bool] = []
    for crossover in (None, None, 5.0, 5.4, 5.6, 5.1, None):
        rule.crossover = crossover
        logged.append(rule.to_log())
    assert logged == [True, False, True, False, True, False, True]
    assert not FramesOrRaw("zstd", raw=False).to_log(), "frames always: nothing decides"
