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
    # Not the encoder's: the output mode wrote the value as it came, for the producer's batch
    # compression (`codec.output_mode`); counted at its size in and out, no saving of ours.
    RAW: Final = "raw"
    #: What the encoding relays and the in-process producers count: the encoder's and `raw`.
    COUNTED: Final = (*ALL, RAW)
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
    #: The shadow sample of the records written raw (`codec.raw_shadow`), scaled to the records
    #: it stands for: counted for the live ratio only, never in the totals above.
    shadow_messages: int = 0
    shadow_input_bytes: int = 0
    shadow_output_bytes: int = 0

    @property
    def messages(self) -> int:
        return sum(self.outcomes.values())

    @property
    def live_messages(self) -> int:
        """Records the live ratio stands on: those encoded and those the shadow sample took for."""
        return self.messages + self.shadow_messages

    @property
    def live_input_bytes(self) -> int:
        """Input bytes of the live ratio: values no dictionary could shrink left out, the
        shadow sample's (scaled) in."""
        return self.input_bytes - self.excluded_bytes + self.shadow_input_bytes

    @property
    def live_output_bytes(self) -> int:
        """Output bytes of the live ratio (as `live_input_bytes`)."""
        return self.output_bytes - self.excluded_bytes + self.shadow_output_bytes

    @property
    def ratio(self) -> float:
        """Input bytes / output bytes; 1.0 before any byte was seen."""
        return self.input_bytes / self.output_bytes if self.output_bytes else 1.0
