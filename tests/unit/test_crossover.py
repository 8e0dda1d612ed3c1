"""The output crossover on real data nobody here wrote: measured at training on values the stored
dictionary did not see, it predicts where the stream's next values cross, the mode it picks
stores about what the better of frames and raw values would at every fill, and it is the same
on every run. Measured again on the stream's newest records (`live_crossover`), the mode the
output rule picks with it, hysteresis included, stores within 2 % of the better at every fill."""

from __future__ import annotations

import sysconfig

import pytest

from sidecar.bench.corpora import Corpus, collect_all
from sidecar.bench.events import generate
from sidecar.codec import Encoder
from sidecar.codec.output_mode import FRAMES_BELOW, RAW_ABOVE
from sidecar.live_crossover import MIN_BATCHES, MIN_FEW, MIN_RECORDS, LiveCrossover
from sidecar.record_batch import producer_codecs, stored_bytes
from sidecar.stored_estimate import ProducerBatches
from sidecar.training.choice import TrainingReport, candidate_dictionary, train
from sidecar.training.crossover import raw_crossovers
from sidecar.training.params import Decision, TrainingParams
from sidecar.training.split import split_newest
from sidecar.wire.record_batch import Record

#: Log lines and CSV lines long enough for a 2,000-value sample (the relay's first training)
#: and the 2,048 values after it; the generator's JSON events beside them.
CORPORA = ("dpkg-log", "python-record-csv")
SAMPLE = 2000
NEXT = 2048
FILLS = (1, 4, 16, 32, 64, 128, 512)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def streams() -> list[Corpus]:
    found, missing = collect_all(
        sysconfig.get_paths()["purelib"], limit=SAMPLE + NEXT, only=CORPORA
    )
    assert not missing, f"sources missing on this machine: {missing}"
    events = list(generate("product_viewed", SAMPLE + NEXT, seed=5))
    return [*found, Corpus("product_viewed", "generated JSON events", events)]


def _trained(stream: Corpus) -> TrainingReport:
    lines = [(0, n, v) for n, v in enumerate(stream.messages[:SAMPLE], 1)]
    report = train(split_newest(lines, unit="line"), TrainingParams(timing_runs=1), namespace="x")
    assert report.decision is Decision.PROMOTED, (stream.name, report.reason)
    return report


def _next_records(stream: Corpus, report: TrainingReport) -> tuple[list[Record], list[Record]]:
    """The values after the sample, raw and as the stored dictionary encodes them."""
    values = stream.messages[SAMPLE:]
    encoded = _encoder(report).encode_batch([(v, None) for v in values])
    return [(v, ()) for v in values], [(e.value, e.headers or ()) for e in encoded]


def _encoder(report: TrainingReport) -> Encoder:
    """The encoder of the stored dictionary, as the relay builds it."""
    assert report.chosen is not None and report.dictionary is not None
    level = report.chosen.level
    dictionary = candidate_dictionary(report.dictionary, level, "x")
    return Encoder(dictionary, level=level, min_size=report.break_even_size)


def _live(sample: ProducerBatches, encoder: Encoder, trained: float | None) -> LiveCrossover:
    """The live crossover of `sample` encoded by `encoder`; `trained` before it measures."""
    return LiveCrossover(lambda: sample, lambda: encoder, lambda _: trained)


def _measured(stream: Corpus) -> tuple[float | None, list[Record], list[Record]]:
    """The zstd crossover training measured, and the values after the sample, raw and as the
    stored dictionary encodes them."""
    report = _trained(stream)
    assert report.raw_crossover is not None
    return report.raw_crossover["zstd"], *_next_records(stream, report)


def test_the_crossover_is_within_a_factor_of_two_of_where_the_next_values_cross(
    streams: list[Corpus],
) -> None:
    zstd = producer_codecs()["zstd"]
    for stream in streams:
        measured, _, frames = _measured(stream)
        later = raw_crossovers(stream.messages[SAMPLE:], frames, {"zstd": zstd})["zstd"]
        assert measured is not None and later is not None, (stream.name, measured, later)
        assert later / 2 <= measured <= later * 2, (stream.name, measured, later)


def test_the_mode_the_trained_crossover_picks_stores_at_most_10_percent_over_the_better(
    streams: list[Corpus],
) -> None:
    """Its worst, 8.3 % at dpkg's log at fill 4 (the log drifts from the values training saw),
    is why the output rule measures it again on the live stream (the test below: 2 %)."""
    zstd = producer_codecs()["zstd"]
    for stream in streams:
        at, raw, frames = _measured(stream)
        for fill in FILLS:
            as_raw, as_frames = stored_bytes(raw, fill, zstd), stored_bytes(frames, fill, zstd)
            picked = as_raw if at is not None and fill >= at else as_frames
            assert picked <= 1.10 * min(as_raw, as_frames), (stream.name, fill, at)


def test_the_crossover_is_the_same_on_every_run(streams: list[Corpus]) -> None:
    for stream in streams[:1] + streams[-1:]:
        assert _trained(stream).raw_crossover == _trained(stream).raw_crossover


def test_the_live_crossover_picks_a_mode_within_2_percent_of_the_better_at_any_fill(
    streams: list[Corpus],
) -> None:
    """The relay's sample of the first half of the values after the training sample measures
    the crossover; the second half is stored as the rule picks, either mode inside the band of
    its hysteresis."""
    zstd = producer_codecs()["zstd"]
    half = NEXT // 2
    for stream in streams:
        report = _trained(stream)
        sample = ProducerBatches(None, every=1, keep=half, run=half)
        for value in stream.messages[SAMPLE : SAMPLE + half]:
            sample.add(None, value, ())
        at = _live(sample, _encoder(report), None)("zstd")
        raw, frames = _next_records(stream, report)
        for fill in FILLS:
            as_raw = stored_bytes(raw[half:], fill, zstd)
            as_frames = stored_bytes(frames[half:], fill, zstd)
            if at is None or fill < at * FRAMES_BELOW:
                picked = as_frames
            elif fill > at * RAW_ABOVE:
                picked = as_raw
            else:
                picked = max(as_raw, as_frames)
            assert picked <= 1.02 * min(as_raw, as_frames), (stream.name, fill, at)


def test_the_trained_crossover_stands_until_the_sample_holds_a_few_records(
    streams: list[Corpus],
) -> None:
    stream = streams[-1]
    encoder = _encoder(_trained(stream))
    sample = ProducerBatches(None, every=1, keep=NEXT, run=NEXT)
    live = _live(sample, encoder, 99.0)
    for value in stream.messages[SAMPLE : SAMPLE + MIN_FEW - 1]:
        sample.add(None, value, ())
    assert live("zstd") == 99.0
    for value in stream.messages[SAMPLE + MIN_FEW - 1 : SAMPLE + MIN_RECORDS]:
        sample.add(None, value, ())
    measured = live("zstd")
    assert measured is not None and measured < 99.0
    assert live("none") == 99.0


def test_a_small_samples_crossing_stands_and_frames_winning_there_only_bound_the_trained_one(
    streams: list[Corpus],
) -> None:
    """32 lines of dpkg's log cross near 3.7 at the fills they hold 4 batches of (1-8): that
    stands whatever training said. 20 generated events, which cross near 10, show frames
    winning up to fill 4 only: the trained crossover stands, but not below 4."""
    dpkg = next(s for s in streams if s.name == "dpkg-log")
    few = ProducerBatches(None, every=1)
    for value in dpkg.messages[SAMPLE : SAMPLE + 32]:
        few.add(None, value, ())
    encoder = _encoder(_trained(dpkg))
    for trained in (None, 99.0):
        crossing = _live(few, encoder, trained)("zstd")
        assert crossing is not None and crossing * MIN_BATCHES <= 32, (trained, crossing)
    events = streams[-1]
    fewer = ProducerBatches(None, every=1)
    for value in events.messages[SAMPLE : SAMPLE + 20]:
        fewer.add(None, value, ())
    encoder = _encoder(_trained(events))
    assert _live(fewer, encoder, 2.0)("zstd") == 4.0
    assert _live(fewer, encoder, 6.0)("zstd") == 6.0
    assert _live(fewer, encoder, None)("zstd") is None


def test_a_measurement_stands_for_its_interval_but_a_small_sample_that_doubled(
    streams: list[Corpus],
) -> None:
    """The proxy's reading, once per Produce request: measured again once the interval is
    over, or sooner while the sample is small and doubled since."""
    stream = streams[-1]
    sample = ProducerBatches(None, every=1, keep=NEXT, run=NEXT)
    now = [0.0]
    encoder = _encoder(_trained(stream))
    # Trained at 1: frames winning at the fills a small sample holds raise it to the largest.
    live = LiveCrossover(
        lambda: sample, lambda: encoder, lambda _: 1.0, interval=5.0, clock=lambda: now[0]
    )
    values = iter(stream.messages[SAMPLE:])
    for _ in range(MIN_FEW - 1):
        sample.add(None, next(values), ())
    assert live("zstd") == 1.0
    sample.add(None, next(values), ())
    assert live("zstd") == 1.0, "not doubled yet, within the interval"
    for _ in range(MIN_FEW):
        sample.add(None, next(values), ())
    assert live("zstd") == 4.0, "doubled: measured at fills 1-4"
    for _ in range(MIN_RECORDS):
        sample.add(None, next(values), ())
    full = live("zstd")
    sample.add(None, next(values), ())
    assert live("zstd") == full, "a full sample's measurement stands within the interval"
    now[0] = 5.0
    for _ in range(MIN_RECORDS):
        sample.add(None, next(values), ())
    assert live("zstd") != full, "measured again on the newer values"


def test_without_a_dictionary_the_live_crossover_is_measured_too(streams: list[Corpus]) -> None:
    """Values compressed on their own (`zd: 0`) lose to the batch codec as frames do."""
    stream = streams[-1]
    sample = ProducerBatches(None, every=1, keep=NEXT, run=NEXT)
    for value in stream.messages[SAMPLE : SAMPLE + NEXT]:
        sample.add(None, value, ())
    measured = _live(sample, Encoder(None), None)("zstd")
    assert measured is not None and measured <= 4


def test_a_few_kilobyte_values_are_enough_for_the_live_crossover(streams: list[Corpus]) -> None:
    stream = streams[-1]
    sample = ProducerBatches(None, every=1)
    for i in range(10):  # ten documents of 80 events each, ~9 KB
        sample.add(None, b"\n".join(stream.messages[SAMPLE + 80 * i : SAMPLE + 80 * (i + 1)]), ())
    assert _live(sample, _encoder(_trained(stream)), 99.0)("zstd") != 99.0
