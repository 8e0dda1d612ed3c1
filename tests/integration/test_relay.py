"""`zdict-sidecar run` as a real process against the real broker: what it guarantees, in figures.

Every test starts the sidecar with `python -m sidecar run ...` (JSON logs to a file), feeds it
through Kafka and reads its output back with an independent consumer (and, for a sample, with
kcat and the zstd CLI). No mocks: a test that cannot reach the broker fails.

Figures (lost, duplicates, timings) are printed; run with ``-s`` (or see ``-rA``) to read them.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sidecar.bench.events import generate
from sidecar.codec import ZSTD_MAGIC, Decoder, Encoder, header_cost
from sidecar.dictionaries import Dictionary
from sidecar.dictionaries.store import DictionaryStore

from .launch import StartSidecar
from .matching import match_output
from .probe import KafkaProbe
from .process import Sidecar, free_port
from .records import ConsumeAll, Outgoing, ProduceEvents, ProduceRecords, Record
from .topics import MakeTopic
from .training import train_dictionary
from .waiting import wait_until

HEADER = "zd"
SECRET = "s3cr3t-value"
# A member killed with -9 stays in the group until its session times out (librdkafka's default
# is 45 s); the broker's minimum keeps the restarted relay's wait short.
SHORT_SESSION = {"ZDICT_CONSUMER__SESSION_TIMEOUT_MS": "6000"}


def _run_args(topic: str, store: Path, group: str, *extra: str) -> list[str]:
    return [
        "run",
        "--input-topic",
        topic,
        "--create-topics",
        "--dictionaries",
        str(store),
        "--group-id",
        group,
        *extra,
    ]


def _group() -> str:
    return f"zdict-it-relay-{uuid.uuid4().hex[:12]}"


def _small_dictionary(tmp_path: Path, topic: str) -> Path:
    """A dictionary for `topic` trained on 5,000 events of another seed; returns the store."""
    store = tmp_path / "dictionaries"
    train_dictionary(store, topic, list(generate("product_viewed", 5_000, seed=901)), tmp_path)
    return store


def relay_group(proc: Sidecar) -> str:
    return proc.command[proc.command.index("--group-id") + 1]


def _errors(proc: Sidecar) -> list[dict[str, Any]]:
    return [line for line in proc.log_lines() if line.get("level") in ("error", "critical")]


# -- 1. the full record contract -----------------------------------------------------------------

N_FULL = 100_000
N_KCAT_SAMPLE = 20


def _read_and_match(
    kafka_probe: KafkaProbe,
    consume_all: ConsumeAll,
    output: str,
    inputs: Any,
    store_dir: Path,
    namespace: str,
) -> Any:
    """Read the whole output topic and match it against `inputs` (see `match_output`)."""
    total = kafka_probe.count(output)
    outputs = consume_all(output, total, timeout=60)
    assert len(outputs) == total
    dict_id = DictionaryStore(store_dir).active_id(namespace)
    assert dict_id is not None
    return match_output(inputs, outputs, Decoder.from_store(DictionaryStore(store_dir)), dict_id)


def _full_inputs(dictionary: Dictionary, start: int) -> tuple[list[bytes | None], list[Outgoing]]:
    """N_FULL keyed events with explicit (irregular) timestamps from `start` (ms); some with
    headers (a repeated key, a null value), some tombstones, some already ours (a frame with
    `zd`, with `dictionary` or none), a few empty, binary and large values. Returns the event each
    input carries (None: a tombstone) and the inputs."""
    rng = random.Random(20251202)
    with_dict, without_dict = Encoder(dictionary), Encoder(None)
    originals: list[bytes | None] = []
    outgoing: list[Outgoing] = []
    for i, event in enumerate(generate("product_viewed", N_FULL, seed=1)):
        key = b"user-%04d" % rng.randrange(200)
        timestamp = start + i + rng.randrange(500)
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 7 == 0:
            trace = b"%016x" % rng.getrandbits(64)
            headers = (("trace-id", trace), ("tag", b"a"), ("tag", b"b"), ("nothing", None))
        elif i % 11 == 0:
            headers = (("source", b"web"),)
        value: bytes | None = event
        if i % 401 == 0:
            value = None
        elif i % 333 == 0:  # already encoded upstream: must pass through untouched
            encoder = with_dict if i % 2 else without_dict
            value = encoder.compress(event)
            ours = encoder.header
            headers = (ours, *headers) if i % 3 else (*headers, ours)
        elif i % 997 == 0:
            value = event = b""
        elif i % 1009 == 0:
            value = event = b"bin\x00" + rng.randbytes(300)
        elif i % 9973 == 0:
            value = event = b"\n".join([event] * 3000)  # ~330 KB
        originals.append(value if value is None else event)
        outgoing.append(Outgoing(key, value, headers, timestamp))
    return originals, outgoing


def test_relays_100k_records_byte_exact_keeping_keys_timestamps_headers_and_counts_them(
    make_topic: MakeTopic,
    produce_records: ProduceRecords,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    kafka_bootstrap: str,
    sidecar: StartSidecar,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=3, name_prefix="relay-full")
    output = f"{topic}.zd"
    store_dir = tmp_path / "dictionaries"
    training = list(generate("product_viewed", 20_000, seed=77))
    dict_id, dict_file = train_dictionary(store_dir, topic, training, tmp_path)
    store = DictionaryStore(store_dir)
    dictionary = store.active(topic)
    assert dictionary is not None

    originals, outgoing = _full_inputs(dictionary, int(time.time() * 1000) - 2 * N_FULL)
    inputs = produce_records(topic, outgoing)
    assert len({r.partition for r in inputs}) == 3

    started = time.monotonic()
    relay = sidecar(*_run_args(topic, store_dir, _group()), name="relay")
    wait_until(lambda: kafka_probe.count(output) > 0 or not relay.running(), 60, "first output")
    assert relay.running(), relay.tail()
    assert relay.http_get("/healthz")[0] == 200
    assert relay.http_get("/readyz") == (200, b"ready\n")
    wait_until(
        lambda: kafka_probe.count(output) >= N_FULL or not relay.running(), 120, "all output"
    )
    relay_seconds = time.monotonic() - started
    assert relay.running(), relay.tail()
    assert relay.http_get("/healthz")[0] == 200
    assert relay.http_get("/readyz")[0] == 200
    wait_until(lambda: kafka_probe.caught_up(relay_group(relay), topic), 30, "final commit")
    scraped = relay.metrics()
    code = relay.stop()
    assert code == 0, relay.tail()
    stopped = relay.events("relay_stopped")
    assert stopped and stopped[-1]["consumed"] == stopped[-1]["delivered"] == N_FULL
    assert _errors(relay) == []

    outputs = consume_all(output, N_FULL, timeout=60)
    assert len(outputs) == N_FULL
    assert kafka_probe.count(output) == N_FULL, "more output records than input records"

    # Record by record: same partition and offset (the output topic has as many partitions,
    # and per-partition order is kept), same key, timestamp and headers, value byte-exact.
    decoder = Decoder.from_store(store)
    ours = Encoder(store.get(dict_id)).header
    in_sorted = sorted(range(N_FULL), key=lambda i: (inputs[i].partition, inputs[i].offset))
    out_sorted = sorted(outputs, key=lambda r: (r.partition, r.offset))
    tally: Counter[str] = Counter()
    compressed: list[tuple[Record, bytes]] = []
    output_bytes = 0
    for i, out in zip(in_sorted, out_sorted, strict=True):
        inp = inputs[i]
        assert (out.partition, out.offset) == (inp.partition, inp.offset)
        assert (out.key, out.timestamp) == (inp.key, inp.timestamp)
        if inp.value is None:
            assert out.value is None and out.headers == inp.headers
            tally["tombstone"] += 1
            continue
        output_bytes += len(out.value or b"")
        if any(k == HEADER for k, _ in inp.headers):
            assert (out.value, out.headers) == (inp.value, inp.headers), "ours, yet re-encoded"
            tally["already_encoded"] += 1
        elif out.headers == (*inp.headers, ours):
            assert out.value != inp.value
            compressed.append((out, inp.value))
            output_bytes += header_cost(*ours)
            tally["compressed"] += 1
        else:
            assert (out.value, out.headers) == (inp.value, inp.headers)
            tally["passed_through"] += 1
        assert decoder.decode(out.value, list(out.headers)) == originals[i]
    plain = N_FULL - tally["tombstone"] - tally["already_encoded"]
    assert tally["compressed"] > 0.95 * plain, tally

    # The compressed values are zstd frames without their magic number (the compact wire format):
    # kcat reads them, the zstd CLI decodes them once the 4-byte magic is prepended.
    for out, raw in random.Random(3).sample(compressed, N_KCAT_SAMPLE):
        fetched = subprocess.run(
            [
                *("kcat", "-C", "-b", kafka_bootstrap, "-t", output),
                *("-p", str(out.partition), "-o", str(out.offset), "-c", "1", "-D", "", "-e", "-q"),
            ],
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
        assert fetched == out.value
        plain_bytes = subprocess.run(
            ["zstd", "-d", "-q", "-c", "-D", str(dict_file)],
            input=ZSTD_MAGIC + fetched,
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
        assert plain_bytes == raw

    # The metrics count exactly what went through.
    def sample(name: str, **labels: str) -> float:
        return scraped.get((name, frozenset(labels.items())), 0.0)

    by_outcome = {
        labels_dict["outcome"]: value
        for (name, labels), value in scraped.items()
        if name == "zdict_records_total"
        for labels_dict in [dict(labels)]
        if labels_dict.get("topic") == topic
    }
    input_bytes = sum(len(r.value) for r in inputs if r.value is not None)
    assert sum(by_outcome.values()) == N_FULL
    assert by_outcome["compressed"] == tally["compressed"]
    assert by_outcome["tombstone"] == tally["tombstone"]
    assert by_outcome["already_encoded"] == tally["already_encoded"]
    assert sample("zdict_input_bytes_total", topic=topic, op="encode") == input_bytes
    assert sample("zdict_output_bytes_total", topic=topic, op="encode") == output_bytes
    assert sample("zdict_assigned_partitions", group=relay_group(relay)) == 3
    print(
        f"\n[full] {N_FULL:,} records relayed in {relay_seconds:.1f} s "
        f"({N_FULL / relay_seconds:,.0f}/s incl. start): {dict(tally)}; "
        f"{input_bytes:,} B in, {output_bytes:,} B out (ratio {input_bytes / output_bytes:.2f}); "
        f"{N_KCAT_SAMPLE} read back with kcat and decoded by zstd -d -D"
    )


# -- 2./3. stopping mid-run, then restarting ----------------------------------------------------

N_RESTART = 200_000
STOP_AFTER = {"sigterm": 50_000, "sigkill": 80_000}


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_stop_mid_run_then_restart_loses_nothing_and_sigterm_duplicates_nothing(
    how: str,
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    sidecar: StartSidecar,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=3, name_prefix=f"relay-{how}")
    output = f"{topic}.zd"
    store_dir = _small_dictionary(tmp_path, topic)
    inputs = produce_events(topic, N_RESTART, seed=2)
    group = _group()
    args = _run_args(topic, store_dir, group)

    first = sidecar(*args, env=SHORT_SESSION, name=f"{how}-first")
    t0 = time.monotonic()

    # SIGKILL once something was committed, so the restart has both a committed part to skip
    # and an uncommitted, already delivered part to redo.
    def far_enough() -> bool:
        if not first.running():
            return True
        if kafka_probe.count(output) < STOP_AFTER[how]:
            return False
        return how == "sigterm" or any(o > 0 for o in kafka_probe.committed(group, topic).values())

    wait_until(far_enough, 90, f"{STOP_AFTER[how]:,} output records", interval=0.02)
    at_signal = kafka_probe.count(output)
    signalled = time.monotonic()
    if how == "sigterm":
        code = first.stop()
        assert code == 0, first.tail()
    else:
        first.kill()
        code = first.wait()
        assert code == -9
    stop_seconds = time.monotonic() - signalled
    delivered_first = kafka_probe.count(output)
    committed = kafka_probe.committed(group, topic)
    committed_first = sum(max(0, offset) for offset in committed.values())
    assert delivered_first < N_RESTART, "the first run finished before it was stopped"
    if how == "sigterm":
        # The graceful stop committed exactly what it delivered, partition by partition.
        assert committed == kafka_probe.end_offsets(output)
        assert first.events("relay_stopped")[-1]["delivered"] == delivered_first
    else:
        assert committed_first <= delivered_first

    second = sidecar(*args, env=SHORT_SESSION, name=f"{how}-second")
    t1 = time.monotonic()
    wait_until(lambda: kafka_probe.caught_up(group, topic), 120, "the restart to catch up")
    restart_seconds = time.monotonic() - t1
    code = second.stop()
    assert code == 0, second.tail()
    assert _errors(first) == [] and _errors(second) == []

    m = _read_and_match(kafka_probe, consume_all, output, inputs, store_dir, topic)
    print(
        f"\n[{how}] {N_RESTART:,} inputs; stopped after {signalled - t0:.1f} s at "
        f"{at_signal:,} delivered (exit {first.proc.returncode} in {stop_seconds:.2f} s); "
        f"first run: {delivered_first:,} delivered, {committed_first:,} committed; restart "
        f"caught up in {restart_seconds:.1f} s; output {m.outputs:,}: lost {m.lost}, "
        f"duplicates {m.duplicates:,} (all byte-identical), rewinds {m.rewinds}"
    )
    assert m.lost == 0
    if how == "sigterm":
        assert m.duplicates == 0 and m.rewinds == 0 and m.outputs == N_RESTART
    else:
        assert m.duplicates == delivered_first - committed_first


# -- 4. two processes in one group --------------------------------------------------------------

N_WORKERS = 120_000
WORKERS_RATE = 15_000.0  # records/s: input keeps arriving while the group changes


def test_two_processes_share_the_partitions_and_the_survivor_takes_over_without_loss(
    make_topic: MakeTopic,
    produce_events: ProduceEvents,
    consume_all: ConsumeAll,
    kafka_probe: KafkaProbe,
    sidecar: StartSidecar,
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=4, name_prefix="relay-workers")
    output = f"{topic}.zd"
    store_dir = _small_dictionary(tmp_path, topic)
    group = _group()
    args = _run_args(topic, store_dir, group)
    all_partitions = {f"{topic}[{p}]" for p in range(4)}

    inputs: list[Record] = []
    producing = threading.Thread(
        target=lambda: inputs.extend(produce_events(topic, N_WORKERS, seed=4, rate=WORKERS_RATE)),
        daemon=True,
    )
    a = sidecar(*args, name="worker-a")
    a.wait_for_event("partitions_assigned")
    producing.start()
    t0 = time.monotonic()
    b = sidecar(*args, name="worker-b")
    wait_until(
        lambda: (
            a.assignment() and b.assignment() and a.assignment() | b.assignment() == all_partitions
        ),
        60,
        "both processes to hold partitions",
    )
    assert not a.assignment() & b.assignment()
    shared = [sorted(int(p.rsplit("[", 1)[1][:-1]) for p in w.assignment()) for w in (a, b)]

    def relayed_by(proc: Sidecar) -> float:
        return sum(
            value
            for (name, labels), value in proc.metrics().items()
            if name == "zdict_records_total" and ("topic", topic) in labels
        )

    wait_until(lambda: relayed_by(b) >= 5_000, 60, "worker b to relay records")
    left_at = kafka_probe.count(output)
    still_producing = producing.is_alive()
    assert left_at < N_WORKERS, "the input was all relayed before worker b stopped"
    code = b.stop()
    assert code == 0, b.tail()
    wait_until(lambda: a.assignment() == all_partitions, 60, "worker a to take every partition")
    takeover = time.monotonic() - t0
    producing.join(60)
    assert not producing.is_alive() and len(inputs) == N_WORKERS
    wait_until(lambda: kafka_probe.caught_up(group, topic), 120, "worker a to catch up")
    code = a.stop()
    assert code == 0, a.tail()
    assert _errors(a) == [] and _errors(b) == []
    b_delivered = b.events("relay_stopped")[-1]["delivered"]

    m = _read_and_match(kafka_probe, consume_all, output, inputs, store_dir, topic)
    print(
        f"\n[workers] {N_WORKERS:,} inputs at {WORKERS_RATE:,.0f}/s over 4 partitions; "
        f"a held partitions {shared[0]}, b {shared[1]}; b stopped at {left_at:,} output records "
        f"(input still arriving: {still_producing}) after delivering {b_delivered:,}; "
        f"a held all 4 again {takeover:.1f} s after b started; output {m.outputs:,}: "
        f"lost {m.lost}, duplicates {m.duplicates}, rewinds {m.rewinds}"
    )
    assert m.lost == 0
    assert b_delivered > 0
    # Both handovers were graceful (revoked partitions are flushed and committed first).
    assert m.duplicates == 0 and m.rewinds == 0


# -- 5. failures: exit codes and the line that says why ------------------------------------------


def _one_error_line(proc: Sidecar) -> str:
    lines = proc.log_lines()
    assert all("raw" not in line for line in lines), f"non-JSON output:\n{proc.log_text()}"
    errors = _errors(proc)
    assert len(errors) == 1, proc.log_text()
    assert errors[0]["event"] == "relay_failed"
    return str(errors[0]["error"])


def test_a_missing_input_topic_exits_1_with_one_json_line_naming_it(
    sidecar: StartSidecar, tmp_path: Path
) -> None:
    missing = f"zdict-it-missing-{uuid.uuid4().hex}"
    proc = sidecar(*_run_args(missing, tmp_path / "dictionaries", _group()))
    assert proc.wait(30) == 1
    assert missing in _one_error_line(proc)


def test_a_missing_output_topic_without_create_topics_exits_1_naming_it_and_the_flag(
    make_topic: MakeTopic, kafka_probe: KafkaProbe, sidecar: StartSidecar, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1, name_prefix="relay-no-output")
    args = _run_args(topic, tmp_path / "dictionaries", _group())
    args.remove("--create-topics")
    proc = sidecar(*args)
    assert proc.wait(30) == 1
    line = _one_error_line(proc)
    assert f"{topic}.zd" in line and "--create-topics" in line
    assert kafka_probe.count(f"{topic}.zd") == 0


def test_an_unreachable_broker_exits_1_within_the_unreachable_timeout(
    sidecar: StartSidecar, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    proc = sidecar(
        *_run_args("orders", tmp_path / "dictionaries", _group()),
        bootstrap=address,
        env={"ZDICT_RELAY__UNREACHABLE_TIMEOUT": "3"},
    )
    assert proc.wait(30) == 1
    elapsed = time.monotonic() - started
    line = _one_error_line(proc)
    assert address in line and "no Kafka broker answered" in line
    assert 2.5 <= elapsed <= 15, f"exited after {elapsed:.1f} s with a 3 s timeout"


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ZDICT_RELAY__BATCH_SIZE", "0"),
        ("ZDICT_CONSUMER__ENABLE_AUTO_COMMIT", "true"),
        ("ZDICT_KAFKA__NO_SUCH_PROPERTY", "1"),  # librdkafka refuses it
        ("ZDICT_CONSUMER__FETCH_MIN_BYTES", "lots"),
    ],
)
def test_a_bad_setting_exits_2_naming_the_variable(
    var: str, value: str, sidecar: StartSidecar, tmp_path: Path
) -> None:
    # The input topic does not exist either: the configuration is reported first.
    missing = f"zdict-it-missing-{uuid.uuid4().hex}"
    proc = sidecar(*_run_args(missing, tmp_path / "dictionaries", _group()), env={var: value})
    assert proc.wait(30) == 2, proc.log_text()
    config_lines = [line for line in proc.log_text().splitlines() if "configuration" in line]
    assert len(config_lines) == 1 and var in config_lines[0], proc.log_text()
    assert "Traceback" not in proc.log_text()


@pytest.mark.parametrize(
    "failure", ["missing-topic", "sasl-refused", "bad-setting", "unknown-property", "poison"]
)
def test_the_kafka_password_never_appears_in_the_output_of_a_failure(
    failure: str,
    make_topic: MakeTopic,
    produce_records: ProduceRecords,
    sidecar: StartSidecar,
    tmp_path: Path,
) -> None:
    env: dict[str, str | None] = {
        "ZDICT_KAFKA__SASL_USERNAME": "relay",
        "ZDICT_KAFKA__SASL_PASSWORD": SECRET,
        "ZDICT_LOG_LEVEL": "debug",
        "ZDICT_RELAY__UNREACHABLE_TIMEOUT": "3",
    }
    topic = f"zdict-it-missing-{uuid.uuid4().hex}"
    expected = 1
    if failure == "sasl-refused":  # SASL against a plaintext listener: no broker answers
        topic = make_topic(partitions=1, name_prefix="relay-secret")
        env |= {"ZDICT_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT"}
        env |= {"ZDICT_KAFKA__SASL_MECHANISM": "PLAIN"}
    elif failure == "bad-setting":
        env |= {"ZDICT_RELAY__BATCH_SIZE": "0"}
        expected = 2
    elif failure == "unknown-property":
        env |= {"ZDICT_KAFKA__SASL_PASSWORD_FILE": SECRET}
        expected = 2
    elif failure == "poison":  # runs, logs its (redacted) settings, then cannot produce a record
        topic = make_topic(partitions=1, name_prefix="relay-secret")
        produce_records(topic, [Outgoing(b"k", random.Random(1).randbytes(5000))])
        env |= {"ZDICT_PRODUCER__MESSAGE_MAX_BYTES": "1000", "ZDICT_KAFKA__DEBUG": "conf"}
    proc = sidecar(*_run_args(topic, tmp_path / "dictionaries", _group()), env=env)
    assert proc.wait(30) == expected, proc.log_text()
    text = proc.log_text()
    assert text.strip(), "a failure must say why"
    assert SECRET not in text
    if failure == "poison":
        configured = proc.events("relay_configured")
        assert configured and configured[0]["kafka"]["sasl.password"] == "***"
        # Refused before producing: encoded, it is larger than the producer's message.max.bytes.
        assert "RecordTooLarge" in _errors(proc)[0]["error"]
