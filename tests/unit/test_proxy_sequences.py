"""Idempotent producers' sequence numbers through the proxy (`sidecar.proxy.sequences`)."""

from __future__ import annotations

from sidecar.proxy.sequences import IDLE_EXPIRY, MAX_SEQUENCE, ProducerIds, Sequences, Verdict

PID, EPOCH, TOPIC, PART = 1000, 0, "orders", 2


def start(seq: Sequences[str], base: int, last: int, epoch: int = EPOCH) -> None:
    check = seq.check(PID, epoch, TOPIC, PART, base, last)
    assert check.verdict is Verdict.NEW, check
    seq.started(PID, epoch, TOPIC, PART, base, last, f"waiter-{base}")


def test_batches_in_order_are_new_and_a_copy_under_way_waits_for_the_first() -> None:
    seq: Sequences[str] = Sequences()
    start(seq, 0, 9)
    start(seq, 10, 14)
    again = seq.check(PID, EPOCH, TOPIC, PART, 10, 14)
    assert (again.verdict, again.waiter) == (Verdict.IN_FLIGHT, "waiter-10")


def test_a_batch_sent_again_after_it_was_written_gets_its_offset_back() -> None:
    seq: Sequences[str] = Sequences()
    start(seq, 0, 9)
    seq.finished(PID, EPOCH, TOPIC, PART, 0, 500)
    again = seq.check(PID, EPOCH, TOPIC, PART, 0, 9)
    assert (again.verdict, again.base_offset) == (Verdict.DUPLICATE, 500)
    assert seq.check(PID, EPOCH, TOPIC, PART, 10, 12).verdict is Verdict.NEW


def test_a_gap_is_out_of_order_naming_the_sequence_expected() -> None:
    seq: Sequences[str] = Sequences()
    start(seq, 0, 9)
    check = seq.check(PID, EPOCH, TOPIC, PART, 11, 12)
    assert (check.verdict, check.expected) == (Verdict.OUT_OF_ORDER, 10)


def test_a_failed_batch_can_be_sent_again_even_after_a_later_one() -> None:
    seq: Sequences[str] = Sequences()
    start(seq, 0, 9)
    start(seq, 10, 19)
    seq.finished(PID, EPOCH, TOPIC, PART, 0, None)  # upstream failed it
    seq.finished(PID, EPOCH, TOPIC, PART, 10, 100)
    assert seq.check(PID, EPOCH, TOPIC, PART, 0, 9).verdict is Verdict.NEW
    start(seq, 0, 9)
    assert seq.check(PID, EPOCH, TOPIC, PART, 20, 29).verdict is Verdict.NEW


def test_only_the_last_five_written_batches_are_remembered() -> None:
    seq: Sequences[str] = Sequences()
    for i in range(7):
        start(seq, i * 10, i * 10 + 9)
        seq.finished(PID, EPOCH, TOPIC, PART, i * 10, i * 100)
    assert seq.check(PID, EPOCH, TOPIC, PART, 20, 29).verdict is Verdict.DUPLICATE
    assert seq.check(PID, EPOCH, TOPIC, PART, 0, 9).verdict is Verdict.OLD


def test_a_new_epoch_starts_over_and_an_old_one_is_fenced() -> None:
    seq: Sequences[str] = Sequences()
    start(seq, 0, 9)
    start(seq, 0, 4, epoch=1)
    assert seq.check(PID, 0, TOPIC, PART, 10, 19).verdict is Verdict.FENCED
    seq.finished(PID, 0, TOPIC, PART, 0, 7)  # the old epoch's outcome changes nothing
    again = seq.check(PID, 1, TOPIC, PART, 0, 4)
    assert (again.verdict, again.waiter) == (Verdict.IN_FLIGHT, "waiter-0")


def test_sequence_numbers_wrap_after_int32() -> None:
    seq: Sequences[str] = Sequences()
    start(seq, MAX_SEQUENCE - 1, MAX_SEQUENCE)
    assert seq.check(PID, EPOCH, TOPIC, PART, 0, 3).verdict is Verdict.NEW


def test_a_producer_seen_first_mid_stream_is_taken_as_it_comes() -> None:
    # After a proxy restart: the client goes on with its numbers; the new process accepts them.
    seq: Sequences[str] = Sequences()
    start(seq, 4711, 4720)
    assert seq.check(PID, EPOCH, TOPIC, PART, 4721, 4730).verdict is Verdict.NEW


def test_idle_producers_are_forgotten() -> None:
    now = [0.0]
    seq: Sequences[str] = Sequences(clock=lambda: now[0])
    start(seq, 0, 9)
    seq.finished(PID, EPOCH, TOPIC, PART, 0, 1)
    now[0] = IDLE_EXPIRY * 2
    seq.check(PID + 1, EPOCH, TOPIC, PART, 0, 0)
    assert len(seq) == 0


def test_producer_ids_are_new_each_time_and_bumped_on_request() -> None:
    ids = ProducerIds(clock=lambda: 1_700_000_000.0)
    first, second = ids.new(), ids.new()
    assert first[1] == second[1] == 0 and first[0] != second[0]
    assert ids.new(first[0], 3) == (first[0], 4)
    later = ProducerIds(clock=lambda: 1_700_000_001.0).new()
    assert later[0] > second[0]  # a restarted proxy does not hand out the same ids
