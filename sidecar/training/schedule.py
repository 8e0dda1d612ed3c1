"""When a namespace's trainer trains: first, on schedule, or early on drift. Pure decisions.

Times are Unix seconds (wall clock), because they are compared with times other hosts wrote:
a dictionary's `created_at`, the last training run and operator actions from the registry.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from sidecar.training.params import Trigger

#: The decision of a training entry for a run that was due and not started (the namespace is
#: pinned: `Schedule.skipped`).
SKIPPED: Final = "skipped"

#: A run is due again once the sample holds this many times what the last one trained on
#: (twice, once the reservoir is full): a first dictionary from a few thousand records, then
#: better ones as data grows.
GROWTH_FACTOR: Final = 4


@dataclass(frozen=True, slots=True)
class Policy:
    """The schedule's knobs (the `training` settings), in seconds and fractions."""

    retrain_interval: float = 3600.0
    min_interval: float = 60.0
    drift_tolerance: float = 0.1
    min_messages: int = 10_000


@dataclass(slots=True)
class Schedule:
    """One namespace's schedule: what happened last, and whether a run is due now."""

    policy: Policy
    #: End of the last training run of this namespace, by any host (None: unknown).
    last_run: float | None = None
    #: Whether that run failed (too few samples, a zstd error, the registry was unreachable):
    #: a failed run is retried after `min_interval`, a rejected one waits for the schedule.
    last_failed: bool = False
    #: When the active dictionary was activated or created (None: no dictionary).
    active_since: float | None = None
    #: An operator activated or rolled back: drift and growth wait until the next scheduled run.
    hold_until: float | None = None
    #: The live ratio drift is judged against (None: the held-out ratio, until known).
    reference: float | None = None
    #: Values the last run of this host trained and judged on (None: none yet).
    last_sample: int | None = None

    def due(
        self,
        now: float,
        *,
        sample_messages: int,
        heldout_ratio: float | None,
        live_ratio: float | None,
        sample_full: bool = False,
    ) -> Trigger | None:
        """The reason to train now, or None.

        Args:
            now: Unix seconds.
            sample_messages: values in the namespace's reservoir.
            sample_full: the reservoir is at its byte bound (it cannot grow any more).
            heldout_ratio: the active dictionary's held-out ratio (None: no dictionary).
            live_ratio: the ratio the relay achieves now over the drift window (None: not
                enough traffic in the window to judge).
        """
        if sample_messages < self.policy.min_messages:
            return None
        grown = self.last_sample is not None and (
            sample_messages >= GROWTH_FACTOR * self.last_sample
            or (sample_full and sample_messages >= 2 * self.last_sample)
        )
        recent = self.last_run is not None and now - self.last_run < self.policy.min_interval
        if heldout_ratio is None:
            # No dictionary yet: a larger sample is worth a try at once, not after min_interval.
            if grown:
                return Trigger.GROWTH
            if recent:
                return None
            since = max(t for t in (self.last_run, self.active_since, 0.0) if t is not None)
            scheduled = self.last_failed or now - since >= self.policy.retrain_interval
            return Trigger.FIRST if self.last_run is None or scheduled else None
        if recent:
            return None
        since = max(t for t in (self.last_run, self.active_since, 0.0) if t is not None)
        if self.last_failed or now - since >= self.policy.retrain_interval:
            return Trigger.SCHEDULED
        held = self.hold_until is not None and now < self.hold_until
        if grown and not held:
            return Trigger.GROWTH
        floor = 1.0 - self.policy.drift_tolerance
        if (
            live_ratio is not None
            and self.reference is None
            and live_ratio >= heldout_ratio * floor
        ):
            # The first whole window with this dictionary, within the tolerance. A held-out set
            # comes from the same time span as the training set and flatters it a little;
            # judging later traffic by the lower of the two keeps that gap from reading as
            # drift. (A first window already past the tolerance is drift by the held-out ratio.)
            self.reference = min(heldout_ratio, live_ratio)
            return None
        baseline = heldout_ratio if self.reference is None else self.reference
        if not held and live_ratio is not None and live_ratio < baseline * floor:
            return Trigger.DRIFT
        return None

    def drift_not_cured(self, live_ratio: float | None) -> None:
        """A drift-triggered run found nothing better: today's ratio is the new reference, so
        the same drift does not start a run every `min_interval`."""
        if live_ratio is not None:
            self.reference = live_ratio

    def ran(self, now: float, *, failed: bool = False, sample: int | None = None) -> None:
        """A training run of this namespace ended (promoted, rejected or `failed`); `sample`:
        the values it trained and judged on, when this host ran it."""
        self.last_run = now
        self.last_failed = failed
        if sample is not None:
            self.last_sample = sample

    def skipped(self, now: float) -> None:
        """A run was due at `now` and not started (an operator pinned the namespace): nothing
        is due again before the next scheduled run, which is skipped the same way while the pin
        holds."""
        self.last_run = now
        self.last_failed = False
        self.hold_until = now + self.policy.retrain_interval

    def activated(self, at: float, *, by_operator: bool) -> None:
        """A dictionary became active at `at`; an operator's choice holds drift off until the
        next scheduled run, which is then measured against it."""
        self.active_since = at
        self.hold_until = at + self.policy.retrain_interval if by_operator else None
        self.reference = None


class LiveRatio:
    """The ratio over the last `window` seconds, from an encoder's cumulative byte counters.

    Fed with (time, input bytes, output bytes, messages) totals of one encoder; a new encoder
    (another dictionary) starts a new window, since the old one's ratio says nothing about it.
    """

    def __init__(self, window: float, min_messages: int) -> None:
        self.window = window
        self.min_messages = min_messages
        self._points: deque[tuple[float, int, int, int]] = deque()
        self._source: object | None = None

    def observe(
        self, now: float, source: object, input_bytes: int, output_bytes: int, messages: int
    ) -> None:
        """Record the totals of `source` (an encoder's stats object) at `now` (seconds)."""
        if source is not self._source:
            self._points.clear()
            self._source = source
        self._points.append((now, input_bytes, output_bytes, messages))
        # Keep one point at or before the window's start, so the window is always covered.
        while len(self._points) > 2 and self._points[1][0] <= now - self.window:
            self._points.popleft()

    def reset(self) -> None:
        """Forget the window (the dictionary changed)."""
        self._points.clear()
        self._source = None

    def ratio(self) -> float | None:
        """Input / output bytes over the window; None until a whole window with at least
        `min_messages` messages was seen."""
        if len(self._points) < 2:
            return None
        t0, in0, out0, n0 = self._points[0]
        t1, in1, out1, n1 = self._points[-1]
        if t1 - t0 < self.window or n1 - n0 < self.min_messages or out1 <= out0:
            return None
        return (in1 - in0) / (out1 - out0)
