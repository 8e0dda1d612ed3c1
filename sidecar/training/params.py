"""What configures a training run and what it reports, as plain values: the parameters and their
defaults (`TrainingParams`, the `training` settings), why a run started (`Trigger`) and what it
decided (`Decision`), the last two being the metrics' `trigger` and `result` labels.

Pure, and below the settings and the metrics that name these values (they import this module,
not the training logic of `choice` and `schedule`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from sidecar.codec import DEFAULT_HEADER_KEY, DEFAULT_WIRE_FORMAT, FrameOptions, WireFormat

KIB: Final = 1024
#: CPU budget of one message's encoding, the part every message gets whatever its size (µs):
#: about what the relay's own Kafka path costs per record from Python (`bench relay`). Judged
#: on the cost model (`training.cost`): levels up to 5 fit at any size, level 6 up to ~380 B,
#: level 9 up to ~120 B and level 12 up to ~70 B a message.
DEFAULT_BUDGET_US_PER_MESSAGE: Final = 4.0
#: ... plus this much time per byte, as a throughput (MB/s of input on one core). Together:
#: 5 µs (~200,000 messages/s) at 100 B, 14 µs at 1 KB, 60 µs at 5.6 KB (~94 MB/s).
DEFAULT_BUDGET_MB_PER_S: Final = 100.0
#: Extra CPU per record (µs) the producer's batch codec may take over its default level
#: (`training.batch_level`): at full batches level 12 fits records up to ~330 B, level 9 up to
#: ~640 B, level 6 up to ~1 KB, by the batch cost model; at 5,000 records/s, 2.5 % of a core.
DEFAULT_BATCH_LEVEL_BUDGET_US: Final = 5.0
#: Dictionary sizes tried by default (bytes): 2 KiB to 112 KiB, zstd's default being 112 KiB.
#: Sizes the training sample cannot fill are skipped; held-out data picks among the rest.
DEFAULT_DICT_SIZES: Final = (
    2 * KIB,
    4 * KIB,
    8 * KIB,
    16 * KIB,
    32 * KIB,
    64 * KIB,
    112 * KIB,
)
#: Levels tried by default. Negative levels are zstd's fast modes.
DEFAULT_LEVELS: Final = (-1, 1, 3, 6, 9, 12)
#: Fewer usable samples than this (train + held-out) and no training is attempted. It is only a
#: floor: 32 package descriptions of 8 KB (22 to train, 10 held out, then all 32 for the refit),
#: or a few hundred log lines, already train a dictionary worth having (`zdict-sidecar bench
#: choice`), and whether the held-out part is large enough to trust is judged on the evidence
#: itself (`gain_is_clear`).
DEFAULT_MIN_SAMPLES: Final = 20
#: Held-out messages below which no dictionary is promoted: the smallest held-out size whose
#: ratio is about as good a prediction of the next 1,000 messages as 1,000 held-out messages
#: give, on the real corpora of this machine (`python -m sidecar.bench.heldout`).
DEFAULT_MIN_HELDOUT: Final = 50
#: Share of a sample held out of training to measure the candidates on (its newest slice).
DEFAULT_HELDOUT_FRACTION: Final = 0.2


#: The decision of a training entry for a run that was due and not started (the namespace is
#: pinned: `sidecar.training.schedule.Schedule.skipped`).
SKIPPED: Final = "skipped"


class Trigger(StrEnum):
    """Why a training run started; the metrics label `trigger`."""

    FIRST = "first"  # no dictionary yet and the sample is large enough
    GROWTH = "growth"  # the sample grew well past what the last run trained on
    SCHEDULED = "scheduled"  # `retrain_interval` since the last run (or activation)
    DRIFT = "drift"  # the live ratio fell below the champion's held-out ratio


class Decision(StrEnum):
    """The result of one training run; the metrics label `result`."""

    PROMOTED = "promoted"
    REJECTED = "rejected"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class TrainingParams:
    """Knobs of one training run (the `training` settings)."""

    dict_sizes: tuple[int, ...] = DEFAULT_DICT_SIZES
    levels: tuple[int, ...] = DEFAULT_LEVELS
    #: Fewer usable samples than this (train + held-out) and no training is attempted.
    min_samples: int = DEFAULT_MIN_SAMPLES
    #: Fewer held-out values than this and no dictionary is promoted: its ratio was judged on
    #: too few to be trusted.
    min_heldout: int = DEFAULT_MIN_HELDOUT
    #: The challenger must produce at least this fraction fewer bytes than the champion.
    promotion_margin: float = 0.02
    #: CPU budget per message: `budget_us_per_message` µs plus the message's bytes at
    #: `budget_mb_per_s`, against the cost model's estimate (`training.cost`).
    budget_us_per_message: float = DEFAULT_BUDGET_US_PER_MESSAGE
    budget_mb_per_s: float = DEFAULT_BUDGET_MB_PER_S
    #: The size x level grid is measured on at most this many held-out values, the newest
    #: (the chosen candidate is then measured on all of them).
    grid_eval_limit: int = 4000
    #: Extra CPU per record (µs) the batch codec's level may take over level 3, by the batch
    #: cost model (`training.batch_level`); 0: no budget.
    batch_level_budget_us: float = DEFAULT_BATCH_LEVEL_BUDGET_US
    #: Timing runs of each reported encode time, after one discarded warm-up. The fastest is
    #: used: on a busy machine other work only ever adds time. Reported only: no timing decides.
    timing_runs: int = 3
    #: Train the promoted dictionary again, at the chosen size, on every sample (training and
    #: held-out): the newest values are the closest to the stream's future, and a small sample
    #: cannot spare them.
    refit: bool = True

    def budget_ns(self, mean_bytes: float) -> float:
        """The CPU time one message of `mean_bytes` may take to encode (ns); 0: no budget."""
        if self.budget_us_per_message <= 0 and self.budget_mb_per_s <= 0:
            return 0.0
        per_byte = 1000.0 / self.budget_mb_per_s if self.budget_mb_per_s > 0 else 0.0
        return self.budget_us_per_message * 1000.0 + mean_bytes * per_byte

    frame: FrameOptions = field(default_factory=FrameOptions)
    wire: WireFormat = DEFAULT_WIRE_FORMAT
    header_key: str = DEFAULT_HEADER_KEY
    #: Regular expressions whose matches are removed from training values (never from held-out
    #: values: the ratio is measured on what the relay will really see).
    scrub: tuple[str, ...] = ()
