"""`bench choice`: is the trained dictionary ever worse than a naive one, on data nobody here wrote?

For every corpus (`sidecar.bench.corpora`), a time-ordered split: the first 20 % is all the
product sees (`train()` with default settings, on that part split as `train --input` splits a
file: its newest slice held out), the other 80 %, its future, is encoded with the public
`Encoder`, and the bytes a record costs there are counted (the value plus the header we add,
pass-through included). The choice never sees what it is judged on. Next to it, in the same run,
a naive baseline on the same split: python-zstandard's `train_dictionary` with its defaults at
16, 64 and 112 KiB, levels 1 and 3, trained on all of the first 20 %, each value compressed alone
into a frame without content size or dictionary id, plus the same header, and the best of those
six on the future part itself (an oracle pick: the baseline is stronger than anyone would get
without measuring). A value the naive baseline would not shrink is counted at its raw size too
(its best case).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Final

import zstandard

from sidecar.bench.corpora import Corpus
from sidecar.codec import DEFAULT_HEADER_KEY, Encoder, header_cost
from sidecar.dictionaries.model import MIN_DICT_ID
from sidecar.training.choice import train
from sidecar.training.params import DEFAULT_HELDOUT_FRACTION, Decision, TrainingParams
from sidecar.training.promotion import dictionary_from_report
from sidecar.training.split import split_newest, usable

#: The naive baseline's grid: python-zstandard defaults at these sizes and levels.
NAIVE_SIZES: Final = (16 * 1024, 64 * 1024, 112 * 1024)
NAIVE_LEVELS: Final = (1, 3)
TRAIN_FRACTION: Final = 0.2


@dataclass(frozen=True, slots=True)
class ChoiceRow:
    """One corpus: what the product's choice and the naive baseline store, in bytes."""

    corpus: str
    shape: str
    messages: int
    mean_bytes: float
    raw_bytes: int
    ours_bytes: int
    naive_bytes: int
    naive_pick: str
    decision: str
    dict_size: int
    level: int
    train_seconds: float

    @property
    def ours_ratio(self) -> float:
        return self.raw_bytes / self.ours_bytes

    @property
    def naive_ratio(self) -> float:
        return self.raw_bytes / self.naive_bytes

    @property
    def versus_naive(self) -> float:
        """Our ratio / the naive ratio: below 1.0 the product lost to the naive choice."""
        return self.naive_bytes / self.ours_bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "ours_ratio": round(self.ours_ratio, 4),
            "naive_ratio": round(self.naive_ratio, 4),
            "versus_naive": round(self.versus_naive, 4),
        }


def naive_bytes(train_values: list[bytes], heldout: list[bytes], header: int) -> tuple[int, str]:
    """The naive baseline's bytes on `heldout` (best of its grid) and which one it was."""
    raw = sum(map(len, heldout))
    best = (raw, "raw")
    samples: list[bytes | bytearray | memoryview] = list(train_values)
    for size in NAIVE_SIZES:
        try:
            zdict = zstandard.train_dictionary(size, samples)
        except zstandard.ZstdError:
            continue
        for level in NAIVE_LEVELS:
            cctx = zstandard.ZstdCompressor(
                level=level, dict_data=zdict, write_content_size=False, write_dict_id=False
            )
            total = 0
            for value in heldout:
                cost = len(cctx.compress(value)) + header
                total += min(cost, len(value))
            if total < best[0]:
                best = (total, f"{size // 1024} KiB, level {level}")
    return best


def compare(corpus: Corpus, params: TrainingParams | None = None) -> ChoiceRow:
    """Our choice against the naive one on `corpus`: both see the first 20 %, the rest (the
    stream's future) is measured."""
    params = params or TrainingParams()
    cut = round(len(corpus.messages) * TRAIN_FRACTION)
    seen, heldout = corpus.messages[:cut], corpus.messages[cut:]
    # As `train --input` splits a file: by line number, the newest lines held out.
    lines = [(0, n, v) for n, v in enumerate(seen, 1)]
    samples = split_newest(lines, DEFAULT_HELDOUT_FRACTION, corpus.name, unit="line")
    started = time.perf_counter()
    report = train(samples, params, namespace="bench")
    seconds = time.perf_counter() - started
    if report.decision is Decision.PROMOTED and report.dictionary is not None:
        dictionary = dictionary_from_report(
            report, dict_id=MIN_DICT_ID, version=1, window=corpus.name, parent_id=None
        )
        encoder = Encoder(
            dictionary, frame=params.frame, wire=params.wire, header_key=params.header_key
        )
    else:
        encoder = Encoder(None, frame=params.frame, wire=params.wire, header_key=params.header_key)
    encoded = encoder.encode_batch([(v, None) for v in heldout])
    ours = sum(e.output_bytes for e in encoded)
    header = header_cost(DEFAULT_HEADER_KEY, b"32768")
    naive, pick = naive_bytes([v for v in seen if usable(v)], heldout, header)
    chosen = report.chosen
    return ChoiceRow(
        corpus=corpus.name,
        shape=corpus.shape,
        messages=len(corpus.messages),
        mean_bytes=round(corpus.mean_bytes, 1),
        raw_bytes=sum(map(len, heldout)),
        ours_bytes=ours,
        naive_bytes=naive,
        naive_pick=pick,
        decision=report.decision.value,
        dict_size=chosen.dict_size if chosen else 0,
        level=chosen.level if chosen else 0,
        train_seconds=round(seconds, 2),
    )
