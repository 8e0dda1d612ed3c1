"""What the codec reports: per record (`Transformed`, its `Outcome`), per encoder (`CodecStats`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from sidecar.codec.wire import NO_DICTIONARY, Headers


class Outcome:
    """What the encoder did with one value; the metrics label `outcome`.

    Plain strings rather than an Enum: this is on the per-message path, and hashing an Enum
    member runs Python code while a str hash is cached.
    """

    COMPRESSED: Final = "compressed"
    TOMBSTONE: Final = "tombstone"
    ALREADY_ENCODED: Final = "already_encoded"
    BELOW_THRESHOLD: Final = "below_threshold"
    PRECOMPRESSED: Final = "precompressed"
    NO_GAIN: Final = "no_gain"
    ALL: Final = (COMPRESSED, TOMBSTONE, ALREADY_ENCODED, BELOW_THRESHOLD, PRECOMPRESSED, NO_GAIN)
    SKIPS: Final = (TOMBSTONE, ALREADY_ENCODED, BELOW_THRESHOLD, PRECOMPRESSED, NO_GAIN)
    # The decoding direction (`Decoder.decode_batch`, `run --mode decode`):
    DECODED: Final = "decoded"
    NOT_ENCODED: Final = "not_encoded"  # no header of ours: passed through as it was
    DECODE_ALL: Final = (DECODED, NOT_ENCODED, TOMBSTONE)


class Transformed(NamedTuple):
    """One record value as the codec made it: encoded, decoded or passed through, with its
    headers (a NamedTuple: built once per message, so it must be cheap).

    `output_bytes` is what the record costs afterwards: the value plus the header we added.
    """

    value: bytes | None
    headers: Headers
    outcome: str
    input_bytes: int
    output_bytes: int


@dataclass(slots=True)
class CodecStats:
    """Counts of one encoder: messages by outcome, and bytes in and out (out includes headers).

    `excluded_bytes` are the input bytes of values no dictionary could shrink (already ours, or
    compressed by someone else): they pass through unchanged and are counted in both totals, so
    the ratio with them left out of both is comparable with a held-out ratio (training leaves
    such values out of the held-out set too; the trainer's live ratio leaves them out).
    `dictionary_id` is the dictionary of the encoder counting (0: none), so that a ratio is
    never judged against another dictionary's held-out ratio.
    """

    outcomes: Counter[str] = field(default_factory=Counter)
    input_bytes: int = 0
    output_bytes: int = 0
    excluded_bytes: int = 0
    dictionary_id: int = NO_DICTIONARY

    @property
    def messages(self) -> int:
        return sum(self.outcomes.values())

    @property
    def ratio(self) -> float:
        """Input bytes / output bytes; 1.0 before any byte was seen."""
        return self.input_bytes / self.output_bytes if self.output_bytes else 1.0
