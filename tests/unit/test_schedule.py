"""When the in-process trainer trains: first, scheduled, drift, holds and back-offs."""

from __future__ import annotations

from sidecar.training.params import Trigger
from sidecar.training.schedule import LiveRatio, Policy, Schedule

POLICY = Policy(retrain_interval=3600, min_interval=60, drift_tolerance=0.1, min_messages=1000)


def due(schedule: Schedule, now: float, **kwargs: object) -> Trigger | None:
    args: dict[str, object] = {"sample_messages": 5000, "heldout_ratio": 2.0, "live_ratio": 2.0}
    args.update(kwargs)
    return schedule.due(now, **args)  # type: ignore[arg-type]


def test_the_first_run_waits_for_a_large_enough_sample() -> None:
    schedule = Schedule(POLICY)
    assert due(schedule, 0, heldout_ratio=None, sample_messages=999) is None
    assert due(schedule, 0, heldout_ratio=None, sample_messages=1000) is Trigger.FIRST


def test_a_failed_run_is_retried_after_min_interval_a_rejected_one_after_the_interval() -> None:
    schedule = Schedule(POLICY)
    schedule.ran(100, failed=True)
    assert due(schedule, 159, heldout_ratio=None) is None
    assert due(schedule, 160, heldout_ratio=None) is Trigger.FIRST
    schedule.ran(200, failed=False)  # rejected: no dictionary beat compressing without one
    assert due(schedule, 3799, heldout_ratio=None) is None
    assert due(schedule, 3800, heldout_ratio=None) is Trigger.FIRST


def test_retrains_on_schedule_counting_from_the_last_run_or_activation() -> None:
    schedule = Schedule(POLICY, active_since=1000)
    assert due(schedule, 4599) is None
    assert due(schedule, 4600) is Trigger.SCHEDULED
    schedule.ran(4600)
    assert due(schedule, 8199) is None
    assert due(schedule, 8200) is Trigger.SCHEDULED


def test_drift_triggers_early_when_the_live_ratio_falls_past_the_tolerance() -> None:
    schedule = Schedule(POLICY, active_since=0)
    assert due(schedule, 100, live_ratio=2.0) is None  # the first window: the reference
    assert due(schedule, 100, live_ratio=1.81) is None  # within 10% of 2.0
    assert due(schedule, 100, live_ratio=1.79) is Trigger.DRIFT
    assert due(schedule, 100, live_ratio=None) is None  # not enough traffic to judge
    schedule.ran(100)
    assert due(schedule, 159, live_ratio=1.0) is None  # min_interval between runs
    assert due(schedule, 160, live_ratio=1.0) is Trigger.DRIFT


def test_a_live_ratio_below_the_heldout_one_from_the_start_is_not_drift() -> None:
    schedule = Schedule(POLICY, active_since=0)
    assert due(schedule, 100, heldout_ratio=2.0, live_ratio=1.86) is None
    assert schedule.reference == 1.86
    assert due(schedule, 100, heldout_ratio=2.0, live_ratio=1.70) is None  # 8.6% below 1.86
    assert due(schedule, 100, heldout_ratio=2.0, live_ratio=1.67) is Trigger.DRIFT


def test_a_first_window_already_far_below_the_heldout_ratio_is_drift() -> None:
    schedule = Schedule(POLICY, active_since=0)
    assert due(schedule, 100, heldout_ratio=2.0, live_ratio=1.2) is Trigger.DRIFT
    assert schedule.reference is None


def test_a_drift_no_retraining_could_cure_becomes_the_new_reference() -> None:
    schedule = Schedule(POLICY, active_since=0)
    due(schedule, 100, live_ratio=2.0)
    assert due(schedule, 100, live_ratio=1.5) is Trigger.DRIFT
    schedule.ran(110)
    schedule.drift_not_cured(1.5)
    assert due(schedule, 200, live_ratio=1.5) is None
    assert due(schedule, 200, live_ratio=1.3) is Trigger.DRIFT  # a further drop


def test_an_operator_activation_holds_drift_until_the_next_scheduled_run() -> None:
    schedule = Schedule(POLICY, active_since=0)
    schedule.activated(500, by_operator=True)
    assert due(schedule, 600, live_ratio=2.0) is None  # the reference
    assert due(schedule, 601, live_ratio=1.0) is None
    assert due(schedule, 4099, live_ratio=1.0) is None
    assert due(schedule, 4100, live_ratio=1.0) is Trigger.SCHEDULED
    schedule.activated(5000, by_operator=False)  # a promotion lifts the hold
    assert due(schedule, 5100, live_ratio=2.0) is None
    assert due(schedule, 5100, live_ratio=1.0) is Trigger.DRIFT


def test_live_ratio_needs_a_whole_window_with_enough_messages() -> None:
    live = LiveRatio(window=60, min_messages=100)
    stats = object()
    live.observe(0, stats, 0, 0, 0)
    live.observe(30, stats, 3000, 1500, 50)
    assert live.ratio() is None  # half a window
    live.observe(60, stats, 6000, 3000, 99)
    assert live.ratio() is None  # too few messages
    live.observe(70, stats, 7000, 3500, 110)
    assert live.ratio() == 2.0


def test_live_ratio_slides_and_restarts_with_a_new_encoder() -> None:
    live = LiveRatio(window=60, min_messages=1)
    old = object()
    for t in range(0, 121, 10):
        live.observe(t, old, t * 100, t * 50, t)  # ratio 2.0 throughout
    live.observe(130, old, 12000 + 1000, 6000 + 1000, 131)  # the last 10 s at ratio 1.0
    assert live.ratio() == (13000 - 7000) / (7000 - 3500)  # from t=70 on
    live.observe(140, object(), 10, 10, 1)
    assert live.ratio() is None


def test_without_a_dictionary_a_sample_four_times_larger_is_tried_at_once() -> None:
    schedule = Schedule(POLICY)
    schedule.ran(100, sample=2000)  # rejected: too small to judge
    assert due(schedule, 101, heldout_ratio=None, sample_messages=7999) is None
    assert due(schedule, 101, heldout_ratio=None, sample_messages=8000) is Trigger.GROWTH


def test_with_a_dictionary_growth_waits_for_min_interval() -> None:
    schedule = Schedule(POLICY, active_since=100)
    schedule.ran(100, sample=2000)
    assert due(schedule, 159, sample_messages=8000) is None
    assert due(schedule, 160, sample_messages=8000) is Trigger.GROWTH
    schedule.ran(160, sample=8000)
    assert due(schedule, 300, sample_messages=20_000) is None


def test_a_full_reservoir_that_doubled_counts_as_grown() -> None:
    schedule = Schedule(POLICY, active_since=100)
    schedule.ran(100, sample=3000)
    assert due(schedule, 200, sample_messages=6000) is None
    assert due(schedule, 200, sample_messages=6000, sample_full=True) is Trigger.GROWTH


def test_runs_another_host_made_do_not_count_as_a_sample_size() -> None:
    schedule = Schedule(POLICY, active_since=100)
    schedule.ran(100)  # read from the registry: no sample size known here
    assert due(schedule, 200, sample_messages=50_000) is None
