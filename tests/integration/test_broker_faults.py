"""Broker faults on a real broker of the module's own, the relay a real process.

The broker (``kafka-local --home``) is stopped and started again on its data and ports, or
paused with SIGSTOP and resumed, while events flow into the input and the relay works through
them. `zdict-sidecar verify` (exactly-once: read_committed) then counts what was lost and
duplicated. Each test prints its figures (run with ``-s``).

librdkafka (2.16 here) does not always recover when the only broker was away (stopped, or
paused past its session and fenced, when its metadata briefly lists no broker): a call waiting on
a coordinator bound to the retired broker handle can block for good (confluentinc/librdkafka#5456,
#5511). In exactly-once mode send_offsets_to_transaction does (a watchdog stops the relay), or
keeps timing out for its whole 30 s after the broker is back (its coordinator connection never
finished its handshake, seen once with a 12 s pause); at least once, an offset commit stays
unanswered (the loop commits asynchronously and stops the relay when one is unanswered past
socket.timeout.ms + 30 s); and once an exactly-once relay's clients did not get their
connections back for 90 s while the broker served others (likely the same cause). The relay
then stops with exit 1 and one `relay_failed` line naming the hung call, the silent
coordinator, the unanswered commit or the brokers its clients cannot reach. The tests restart it
as an orchestrator would, count and print the restarts, and still require 0 lost (and, exactly
once, 0 duplicated).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from .launch import RunCli, StartSidecar
from .private_broker import PrivateBroker, StartPrivateBroker
from .probe import KafkaProbe
from .process import Sidecar
from .records import ProduceEvents, Record
from .topics import create_topic
from .waiting import wait_until

GUARANTEES = ["at-least-once", "exactly-once"]
#: What the relay_failed line of a hung transactional call says (sidecar/relay/exactly_once.py).
HUNG = "still blocks after"
#: ... that of an offset commit never answered (sidecar/relay/commits.py) ...
UNANSWERED = "still unanswered after"
#: ... that of a relay whose clients did not get their connections back ...
UNREACHABLE = "no Kafka broker reachable for"
#: ... and that of a transactional call left unanswered (retriable) for its whole timeout.
COORDINATOR_SILENT = "the transaction coordinator did not answer for"
#: Long enough for a broker restart on a loaded machine (down 11-17 s measured), short enough
#: for a relay whose clients are stuck (see the module) to be restarted within the test.
UNREACHABLE_TIMEOUT = "45"
#: The causes for which a relay's exit 1 is a restart, not a failure, of the test.
STOPS_FOR_A_RESTART = (HUNG, UNANSWERED, UNREACHABLE, COORDINATOR_SILENT)
PARTITIONS = 3
#: Events fed while the fault happens: 12 s of input at 2,000/s.
RECORDS = 24_000
RATE = 2_000.0
#: Relay settings shared by every scenario: no training (the broker is the subject here), and
#: exactly-once transactions a few times a second, so a fault catches one open.
RELAY_ENV = {
    "ZDICT_TRAINING__ENABLED": "false",
    "ZDICT_RELAY__TRANSACTION_RECORDS": "2000",
}


@pytest.fixture(scope="module")
def broker(private_broker: StartPrivateBroker) -> Iterator[PrivateBroker]:
    started = private_broker("faults")
    yield started
    started.close()


@pytest.fixture
def serving(broker: PrivateBroker) -> PrivateBroker:
    """The module's broker, serving (an earlier test that failed may have left it down)."""
    if not broker.serving():
        broker.close()
        broker.start()
    return broker


@dataclass
class Run:
    """One relay run against the private broker: its topics, group, feed and probe."""

    broker: PrivateBroker
    topic: str
    output: str
    group: str
    guarantee: str
    probe: KafkaProbe
    feed: Future[list[Record]]
    args: list[str]

    def relaying(self, proc: Sidecar, timeout: float = 90) -> None:
        """Wait until `proc` holds partitions and the output grows."""
        proc.wait_for_event("partitions_assigned", timeout=timeout)
        before = self.probe.count(self.output)
        wait_until(lambda: self.probe.count(self.output) > before, timeout, f"{proc.name} output")

    def finish(self, proc: Sidecar, restart: Callable[[str], Sidecar]) -> int:
        """Let the feed end and the relay commit every input record, then stop it (exit 0).

        A relay that exits 1 with one `relay_failed` line naming a hung client call or
        unreachable brokers (see the module) is started again with `restart(name)`, as an
        orchestrator restarts a pod; any other exit fails. Returns the number of such restarts.
        """
        restarts = 0
        deadline = time.monotonic() + 240
        while not (self.feed.done() and self.probe.caught_up(self.group, self.topic)):
            assert time.monotonic() < deadline, f"{proc.name} did not catch up:\n{proc.tail()}"
            if not proc.running():
                failures = proc.events("relay_failed")
                stuck = (
                    proc.wait() == 1
                    and len(failures) == 1
                    and any(why in failures[0]["error"] for why in STOPS_FOR_A_RESTART)
                )
                assert stuck, f"{proc.name} exited {proc.wait()}:\n{proc.tail()}"
                restarts += 1
                proc = restart(f"relay-restarted-{restarts}")
            time.sleep(0.2)
        self.feed.result(timeout=10)
        assert proc.stop() == 0, proc.tail()
        return restarts

    def verify(self, cli: RunCli) -> dict[str, int]:
        args = ["verify", "--input", self.topic, "--json"]
        if self.guarantee == "exactly-once":
            args.append("--exactly-once")
        verified = cli(*args, env={"KAFKA_BOOTSTRAP_SERVERS": self.broker.bootstrap}, timeout=300)
        report: dict[str, int] = json.loads(verified.stdout)
        assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()
        return report


@pytest.fixture
def relay_run(
    serving: PrivateBroker, produce_events: ProduceEvents, tmp_path: Path
) -> Iterator[Callable[[str], Run]]:
    """Factory: topics on the private broker, events fed at `RATE` in the background, the
    relay's arguments for `guarantee`."""
    pools: list[ThreadPoolExecutor] = []
    probes: list[KafkaProbe] = []

    def start(guarantee: str) -> Run:
        admin = serving.admin()
        topic = create_topic(admin, partitions=PARTITIONS, name_prefix="zdict-it-fault")
        group = f"zdict-it-fault-{uuid.uuid4().hex[:8]}"
        probe = KafkaProbe(serving.bootstrap, admin)
        probes.append(probe)
        pool = ThreadPoolExecutor(1)
        pools.append(pool)
        # The feed's producer buffers through the outage and delivers once the broker is back.
        feed = pool.submit(
            produce_events,
            topic,
            RECORDS,
            seed=91,
            rate=RATE,
            bootstrap=serving.bootstrap,
            flush_timeout=180.0,
        )
        args = [
            *("run", "--input-topic", topic, "--create-topics", "--group-id", group),
            *("--guarantee", guarantee, "--dictionaries", str(tmp_path / "store")),
        ]
        return Run(serving, topic, f"{topic}.zd", group, guarantee, probe, feed, args)

    yield start

    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=True)
    for probe in probes:
        probe.close()


def _figures(report: dict[str, int], guarantee: str) -> str:
    return (
        f"{guarantee}: {report['inputs']:,} records, output {report['outputs']:,}, lost "
        f"{report['lost']}, duplicated {report['duplicated']}, corrupted {report['corrupted']}"
    )


def _check(report: dict[str, int], guarantee: str) -> None:
    assert (report["inputs"], report["lost"], report["corrupted"]) == (RECORDS, 0, 0)
    if guarantee == "exactly-once":
        assert report["duplicated"] == 0


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_broker_restart_within_the_unreachable_timeout_loses_nothing_and_never_hangs_the_relay(
    relay_run: Callable[[str], Run], sidecar: StartSidecar, cli: RunCli, guarantee: str
) -> None:
    run = relay_run(guarantee)
    env = RELAY_ENV | {"ZDICT_RELAY__UNREACHABLE_TIMEOUT": UNREACHABLE_TIMEOUT}

    def start(name: str) -> Sidecar:
        return sidecar(*run.args, env=env, bootstrap=run.broker.bootstrap, name=name)

    proc = start("relay")
    run.relaying(proc)
    time.sleep(1.0)  # records in flight: the feed goes on at 2,000/s
    old_pid = run.broker.pid
    down = time.monotonic()
    stop_seconds = run.broker.stop()
    time.sleep(3.0)
    assert proc.running(), proc.tail()
    restart_seconds = run.broker.start()
    down_seconds = time.monotonic() - down
    back = time.monotonic()
    restarts = run.finish(proc, start)
    caught_up = time.monotonic() - back
    report = run.verify(cli)

    print(
        f"\nbroker restart ({guarantee}): stop {stop_seconds:.1f} s, restart "
        f"{restart_seconds:.1f} s, down {down_seconds:.1f} s in all (pid {old_pid} -> "
        f"{run.broker.pid}); relay restarts (librdkafka stuck, see the module): {restarts}; every "
        f"record committed {caught_up:.1f} s after the broker was back; "
        + _figures(report, guarantee)
    )
    assert run.broker.pid != old_pid
    _check(report, guarantee)


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_broker_paused_past_the_request_timeout_loses_nothing_and_never_hangs_the_relay(
    relay_run: Callable[[str], Run], sidecar: StartSidecar, cli: RunCli, guarantee: str
) -> None:
    run = relay_run(guarantee)
    # Requests time out after 5 s (librdkafka's socket.timeout.ms, the client-side request
    # timeout of both clients, and the producer's request.timeout.ms); the pause is 12 s.
    env = RELAY_ENV | {
        "ZDICT_KAFKA__SOCKET_TIMEOUT_MS": "5000",
        "ZDICT_PRODUCER__REQUEST_TIMEOUT_MS": "5000",
        "ZDICT_RELAY__UNREACHABLE_TIMEOUT": UNREACHABLE_TIMEOUT,
    }
    pause = 12.0

    def start(name: str) -> Sidecar:
        return sidecar(*run.args, env=env, bootstrap=run.broker.bootstrap, name=name)

    proc = start("relay")
    run.relaying(proc)
    time.sleep(1.0)
    run.broker.pause()
    try:
        time.sleep(pause)
        assert proc.running(), proc.tail()
    finally:
        run.broker.resume()
    back = time.monotonic()
    restarts = run.finish(proc, start)
    caught_up = time.monotonic() - back
    report = run.verify(cli)
    # librdkafka's REQTMOUT lines: "Timed out FetchRequest in flight (after 5855ms ...)".
    timeouts = [line for line in proc.log_lines() if "Timed out" in str(line.get("event"))]

    print(
        f"\nbroker paused (SIGSTOP) {pause:.0f} s, requests timing out after 5 s ({guarantee}): "
        f"{len(timeouts)} log lines of timed-out requests; relay restarts "
        f"(librdkafka stuck, see the module): {restarts}; every record committed {caught_up:.1f} s "
        "after SIGCONT; " + _figures(report, guarantee)
    )
    assert timeouts, "the pause should outlast the request timeout"
    _check(report, guarantee)


@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_a_broker_down_past_the_unreachable_timeout_stops_the_relay_and_a_restart_resumes_losing_nothing(  # noqa: E501
    relay_run: Callable[[str], Run], sidecar: StartSidecar, cli: RunCli, guarantee: str
) -> None:
    run = relay_run(guarantee)
    # A relay that stops while no broker answers cannot leave its group: its successor gets the
    # partitions once the group's session times out. 10 s keeps the test short (default 45 s;
    # the transaction timeout must stay below it).
    env = RELAY_ENV | {
        "ZDICT_RELAY__UNREACHABLE_TIMEOUT": "10",
        "ZDICT_CONSUMER__SESSION_TIMEOUT_MS": "10000",
        "ZDICT_CONSUMER__HEARTBEAT_INTERVAL_MS": "1000",
        "ZDICT_PRODUCER__TRANSACTION_TIMEOUT_MS": "8000",
    }

    def start(name: str) -> Sidecar:
        return sidecar(*run.args, env=env, bootstrap=run.broker.bootstrap, name=name)

    proc = start("relay-1")
    run.relaying(proc)
    time.sleep(1.0)
    down = time.monotonic()
    run.broker.stop()
    code = proc.wait(timeout=120)
    exit_seconds = time.monotonic() - down
    failures = proc.events("relay_failed")
    restart_seconds = run.broker.start()
    down_seconds = time.monotonic() - down
    started = time.monotonic()
    again = start("relay-2")
    run.relaying(again)
    resumed = time.monotonic() - started
    restarts = run.finish(again, start)
    caught_up = time.monotonic() - started
    report = run.verify(cli)

    print(
        f"\nbroker down {down_seconds:.1f} s, unreachable_timeout 10 s ({guarantee}): the relay "
        f"exited {code} {exit_seconds:.1f} s after the stop with "
        f"{failures[0]['error'] if failures else None!r}; broker restart {restart_seconds:.1f} s;"
        f" a new relay produced {resumed:.1f} s after its start and every record was committed "
        f"{caught_up:.1f} s after it (further restarts (librdkafka stuck): "
        f"{restarts}); " + _figures(report, guarantee)
    )
    assert code == 1, proc.tail()
    # Exactly-once may name the transactional call that timed out first; it says why, too.
    assert len(failures) == 1 and UNREACHABLE in failures[0]["error"]
    assert restarts == 0 and again.events("relay_failed") == []
    _check(report, guarantee)
