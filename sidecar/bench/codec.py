"""`zdict-sidecar bench codec`: per-message speed and ratio of the codec, next to native zstd.

Method: one warm-up run discarded, then `runs` measured runs; each figure
is the median with [min-max]; every alternative is measured in the same process on the same
messages, so ratios between them are meaningful even on a noisy machine. The native reference is
the `zstd` CLI's own benchmark (`zstd -b -D`) on the same messages, one file per message.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import zstandard
from prometheus_client import CollectorRegistry

from sidecar import __version__
from sidecar.codec import Decoder, Encoder, StaticResolver
from sidecar.errors import InputError
from sidecar.record_batch import producer_codecs
from sidecar.runtime import tune_gc
from sidecar.serde.metrics import ProducerMetrics
from sidecar.serde.serializer import ValueEncoding
from sidecar.training.choice import candidate_dictionary, train
from sidecar.training.params import TrainingParams
from sidecar.training.split import split_ordered
from sidecar.wire.record_batch import BATCH_HEADER_BYTES, Record, records_section

# zstd -b prints e.g. "3#10000 files : 1132741 -> 569876 (x1.988), 94.1 MB/s, 367.4 MB/s"
_ZSTD_BENCH_LINE = re.compile(
    r"(\d+) files\s*:\s*(\d+)\s*->\s*(\d+)\s*\(x?([\d.]+)\),\s*([\d.]+)\s*MB/s,\s*([\d.]+)\s*MB/s"
)


@dataclass(frozen=True, slots=True)
class Speed:
    """Messages per second: median and range over the measured runs."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, rates: Sequence[float]) -> Speed:
        return cls(statistics.median(rates), min(rates), max(rates))

    def __str__(self) -> str:
        return f"{self.median:,.0f} [{self.low:,.0f}-{self.high:,.0f}]"


@dataclass(slots=True)
class CodecResult:
    """One message set: sizes, ratio and the speeds of every path."""

    label: str
    messages: int
    mean_size: float
    dict_bytes: int
    level: int
    ratio_with_header: float
    ratio_frames_only: float
    nodict_ratio: float
    speeds: dict[str, Speed] = field(default_factory=dict)
    native: dict[str, Any] = field(default_factory=dict)
    #: Kafka-style batches (`batch_table`): one row per batch fill.
    batches: list[BatchRow] = field(default_factory=list)
    #: Whole held-out stream as one zstd frame, bytes per message, per level (the oracle).
    oracle: dict[int, float] = field(default_factory=dict)
    #: Encoder path vs the one-C-call batch API (`encode_batch` rate / `multi_compress` rate).
    encode_vs_batch_api: float = 0.0


#: Records per producer batch compared in `bench codec` (Kafka-style batches).
BATCH_FILLS: Final = (1, 2, 4, 8, 16, 64, 512)


@dataclass(slots=True)
class BatchRow:
    """Bytes per message stored in record batches of `fill` records, by variant; speeds of the
    producer codecs compressing those batches (messages/s)."""

    fill: int
    bytes_per_message: dict[str, float] = field(default_factory=dict)
    speeds: dict[str, Speed] = field(default_factory=dict)


def batch_table(
    raw: Sequence[Record], encoded: Sequence[Record], runs: int, fills: Sequence[int] = BATCH_FILLS
) -> list[BatchRow]:
    """Bytes per message of `raw` and of `encoded` (the sidecar's output records) stored in
    record batches of each fill, uncompressed and with each producer codec; exact sizes of
    Kafka's v2 format (`record_batch`). Speeds: each codec compressing the raw batches."""
    codecs = producer_codecs()
    n = len(raw)
    rows = []
    for fill in fills:
        row = BatchRow(fill)
        for label, records in (("raw", raw), ("sidecar", encoded)):
            sections = [records_section(records[i : i + fill]) for i in range(0, n, fill)]
            overhead = BATCH_HEADER_BYTES * len(sections)
            row.bytes_per_message[f"{label} none"] = (overhead + sum(map(len, sections))) / n
            for name, compress in codecs.items():
                size = overhead + sum(len(compress(s)) for s in sections)
                row.bytes_per_message[f"{label} {name}"] = size / n
                if label == "raw":
                    row.speeds[name] = _rates(
                        lambda c=compress, ss=sections: [c(s) for s in ss],  # type: ignore[misc]
                        n,
                        runs,
                    )
        rows.append(row)
    return rows


def _rates(fn: Callable[[], object], count: int, runs: int) -> Speed:
    rates = []
    for run in range(runs + 1):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        if run:  # run 0 is the warm-up
            rates.append(count / elapsed)
    return Speed.of(rates)


def native_zstd_bench(values: Sequence[bytes], dict_data: bytes, level: int) -> dict[str, Any]:
    """`zstd -b` on one file per message with the dictionary: messages/s and ratio, native."""
    zstd = shutil.which("zstd")
    if zstd is None:
        raise InputError(
            "the zstd CLI is not installed (apt-get install zstd); it is the native reference"
        )
    with tempfile.TemporaryDirectory(prefix="zdict-bench-") as tmp:
        root = Path(tmp)
        (root / "dict").write_bytes(dict_data)
        msgs = root / "m"
        msgs.mkdir()
        for i, value in enumerate(values):
            (msgs / f"{i:06d}").write_bytes(value)
        level_args = [f"-b{level}"] if level >= 1 else ["-b", f"--fast={-level}"]
        result = subprocess.run(
            [zstd, *level_args, "-i1", "-D", str(root / "dict"), "-r", str(msgs)],
            capture_output=True,
            text=True,
            check=False,
        )
    matches = _ZSTD_BENCH_LINE.findall(result.stdout + result.stderr)
    if result.returncode != 0 or not matches:
        raise InputError(f"zstd -b failed (exit {result.returncode}): {result.stderr[-300:]}")
    files, raw, comp, _ratio, c_mbs, d_mbs = matches[-1]
    mean = int(raw) / int(files)
    return {
        "compress_msg_per_s": float(c_mbs) * 1e6 / mean,
        "decompress_msg_per_s": float(d_mbs) * 1e6 / mean,
        "ratio_frames_only": int(raw) / int(comp),
        "zstd_cli": subprocess.run([zstd, "-V"], capture_output=True, text=True).stdout.strip(),
    }


def bench_codec(
    label: str, values: Sequence[bytes], runs: int = 3, native_sample: int = 10_000
) -> CodecResult:
    """Train on the first 20% of `values`, then time every codec path on the other 80%."""
    samples = split_ordered(values, 0.2)
    # Default parameters, speed budget included: the dictionary and level a deployment would get.
    report = train(samples, TrainingParams(), namespace="bench")
    if report.chosen is None or report.dictionary is None or report.nodict is None:
        raise InputError(f"{label}: training failed: {report.reason}")
    level = report.chosen.level
    dictionary = candidate_dictionary(report.dictionary, level, "bench")
    heldout = samples.heldout
    records: list[tuple[bytes | None, None]] = [(v, None) for v in heldout]
    encoder = Encoder(dictionary, level=level)
    encoded = encoder.encode_batch(records)
    pairs: list[Record] = [(e.value, e.headers) for e in encoded]
    compressor = encoder._compressor()  # the same compressor the encoder uses, called directly
    decoder = Decoder(StaticResolver([dictionary]))
    n = len(heldout)
    batch: list[bytes | bytearray | memoryview] = list(heldout)
    result = CodecResult(
        label=label,
        messages=n,
        mean_size=samples.heldout_bytes / max(1, n),
        dict_bytes=len(dictionary.data),
        level=level,
        ratio_with_header=report.chosen.ratio,
        ratio_frames_only=samples.heldout_bytes / sum(len(compressor.compress(v)) for v in heldout),
        nodict_ratio=report.nodict.ratio,
    )
    result.speeds["encoder.encode_batch, default GC"] = _rates(
        lambda: encoder.encode_batch(records), n, runs
    )
    with tune_gc():
        result.speeds["encoder.encode_batch (relay path)"] = _rates(
            lambda: encoder.encode_batch(records), n, runs
        )
        # Records that carry the application's headers (a trace id on each, 16 bytes): the
        # relay's path for streams whose producers set headers.
        headed: list[tuple[bytes | None, list[tuple[str, bytes | None]]]] = [
            (v, [("trace-id", b"%016x" % i)]) for i, v in enumerate(heldout)
        ]
        result.speeds["encoder.encode_batch, headers on each (relay path)"] = _rates(
            lambda: encoder.encode_batch(headed), n, runs
        )
        result.speeds["encoder.encode (one call per record)"] = _rates(
            lambda: [encoder.encode(v) for v in heldout], n, runs
        )
        # What ZdictProducer and ZdictSerializer do per record: the codec's rules and the
        # producer metrics' tally (no Kafka, no header list): next to the compress loop below.
        producing = ValueEncoding(encoder, metrics=ProducerMetrics(CollectorRegistry()))
        result.speeds["in-process producers' step (metrics on)"] = _rates(
            lambda: [producing.encode("bench", v, None) for v in heldout], n, runs
        )
        result.speeds["ZstdCompressor.compress loop"] = _rates(
            lambda: [compressor.compress(v) for v in heldout], n, runs
        )
        result.speeds["multi_compress_to_buffer (one C call)"] = _rates(
            lambda: compressor.multi_compress_to_buffer(batch), n, runs
        )
        result.speeds["decoder.decode"] = _rates(
            lambda: [decoder.decode(v, h) for v, h in pairs], n, runs
        )
    result.native = native_zstd_bench(heldout[:native_sample], dictionary.data, level)
    result.encode_vs_batch_api = (
        result.speeds["encoder.encode_batch (relay path)"].median
        / result.speeds["multi_compress_to_buffer (one C call)"].median
    )
    result.batches = batch_table([(v, ()) for v in heldout], pairs, runs)
    whole = b"".join(heldout)
    for oracle_level in (3, 19):
        frame = zstandard.ZstdCompressor(level=oracle_level).compress(whole)
        result.oracle[oracle_level] = len(frame) / n
    return result


def source_commit() -> str | None:
    """`git describe --always --dirty` of the checkout the package runs from (None: not a git
    checkout, e.g. an installed wheel, or no git)."""
    checkout = Path(__file__).resolve().parents[2]
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return described.stdout.strip() or None


def environment() -> dict[str, Any]:
    """Machine, versions and the source's commit, written into every benchmark's JSON."""
    return {
        "commit": source_commit(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "zdict_sidecar": __version__,
        "zstandard": zstandard.__version__,
        "libzstd": ".".join(map(str, zstandard.ZSTD_VERSION)),
    }


def result_dict(result: CodecResult) -> dict[str, Any]:
    data = asdict(result)
    data["speeds"] = {k: asdict(v) for k, v in result.speeds.items()}
    data["batches"] = [
        {
            "fill": row.fill,
            "bytes_per_message": row.bytes_per_message,
            "speeds": {k: asdict(v) for k, v in row.speeds.items()},
        }
        for row in result.batches
    ]
    return data


# -- bench relay ------------------------------------------------------------------------------


@dataclass(slots=True)
class RelayRun:
    """One timed relay run over a pre-loaded topic."""

    variant: str
    messages: int
    seconds: float  # first output record to last
    cpu_seconds: float  # user + system of the relay's processes, whole run (start-up included)
    peak_rss_bytes: int
    training_runs: int = 0  # training runs the sidecar started during the run
    #: CPU seconds of the relay's processes from its first output record seen to its last
    #: (start-up and shutdown excluded), and the records output meanwhile.
    steady_cpu_seconds: float = 0.0
    steady_messages: int = 0

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_record(self) -> float:
        """Steady-state CPU microseconds per relayed record (0.0 when not measured)."""
        if not self.steady_messages:
            return 0.0
        return self.steady_cpu_seconds / self.steady_messages * 1e6


def preload(bootstrap: str, topic: str, kind: str, count: int, partitions: int) -> int:
    """Create `topic` and fill it with `count` generated events; returns the value bytes."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    from sidecar.bench.events import generate
    from sidecar.kafka import plain_admin, plain_producer

    admin = plain_admin(bootstrap)
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(30)
    producer = plain_producer(
        bootstrap,
        {"linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000},
    )
    total = 0
    for i, value in enumerate(generate(kind, count, seed=7)):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        total += len(value)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)
    return total


def _output_count(consumer: Any, topic: str, partitions: int) -> int:
    from confluent_kafka import TopicPartition

    return sum(
        consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
        for p in range(partitions)
    )


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state, first);
    None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def tree_cpu(roots: Sequence[int]) -> float | None:
    """CPU seconds (user + system) of processes `roots` and all their descendants, including
    the children they have reaped; None when a root has exited (its time is then in wait4's
    usage) or /proc cannot say."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    todo = list(roots)
    while todo:
        pid = todo.pop()
        fields = _stat_fields(pid)
        if fields is None or fields[0] in "ZX":
            if pid in roots:
                return None
            continue  # a descendant that ended meanwhile: its parent's cutime has it
        # utime, stime, cutime, cstime are fields 14-17 of the stat line.
        total += sum(int(v) for v in fields[11:15])
        todo.extend(children.get(pid, ()))
    return total / ticks


@dataclass(slots=True)
class _Window:
    """What `_watch` saw: wait statuses and usages of the processes, first and last output."""

    statuses: list[int]
    usages: list[Any]
    first: float
    last: float
    first_count: int
    cpu_first: float | None
    cpu_last: float | None

    def run(self, variant: str, messages: int, training_runs: int = 0) -> RelayRun:
        """The `RelayRun` of the window (`messages` output in all)."""
        cpu = sum(u.ru_utime + u.ru_stime for u in self.usages)
        # wait4's usage covers a process and the children it waited for (--workers N); the
        # peak RSS is the largest single process, not the sum.
        peak = max(u.ru_maxrss for u in self.usages) * 1024
        last_cpu = self.cpu_last if self.cpu_last is not None else cpu
        steady = last_cpu - self.cpu_first if self.cpu_first is not None else 0.0
        return RelayRun(
            variant,
            messages,
            self.last - self.first,
            cpu,
            peak,
            training_runs,
            steady_cpu_seconds=max(0.0, steady),
            steady_messages=messages - self.first_count if self.cpu_first is not None else 0,
        )


def time_relay(
    bootstrap: str,
    topic: str,
    partitions: int,
    messages: int,
    variant: str,
    store: Path,
    workers: int,
    pass_through: bool,
    *,
    output: str | None = None,
    env: Mapping[str, str] | None = None,
) -> RelayRun:
    """Relay the pre-loaded `topic` into a fresh output topic (`output`, default a new name);
    seconds to the last record. `env`: more settings for the sidecar."""
    import uuid

    from sidecar.kafka import plain_consumer

    run_id = uuid.uuid4().hex[:8]
    output = output or f"{topic}.{run_id}"
    argv = [
        sys.executable,
        "-m",
        "sidecar",
        "run",
        "--input-topic",
        topic,
        "--output-topic",
        output,
        "--group-id",
        f"bench-{run_id}",
        "--create-topics",
        "--dictionaries",
        str(store),
        "--metrics-port",
        "0",
        "--workers",
        str(workers),
    ]
    if pass_through:
        argv.append("--pass-through")
    full_env = {
        **os.environ,
        **(env or {}),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "ZDICT_LOG_LEVEL": "info",
        "ZDICT_LOG_FORMAT": "json",
        # The bench's dictionary lives in its own store: a registry of the bench topic's own
        # takes it over, whatever earlier runs left in the cluster's default registry.
        "ZDICT_REGISTRY__TOPIC": f"_zdict_dictionaries-{topic}",
    }
    watcher = plain_consumer(bootstrap, f"bench-watch-{run_id}")
    # The log is read back for the training runs started meanwhile (the trainer is on by default).
    with tempfile.TemporaryFile() as log_file:
        proc = subprocess.Popen(argv, env=full_env, stdout=subprocess.DEVNULL, stderr=log_file)
        window = _watch([proc], watcher, output, partitions, messages, variant)
        log_file.seek(0)
        trainings = log_file.read().count(b'"event": "training_started"')
    code = os.waitstatus_to_exitcode(window.statuses[0])
    if code != 0:
        raise InputError(f"bench relay: {variant} exited {code}")
    return window.run(variant, messages, trainings)


#: Producer properties of the C relay: those the sidecar's own producer runs with
#: (`sidecar.kafka`: acks=all and idempotence fixed, linger.ms 5 and zstd batches by default).
KCAT_PRODUCER: Final = {
    "acks": "all",
    "enable.idempotence": "true",
    "linger.ms": "5",
    "compression.type": "zstd",
    "queue.buffering.max.messages": "200000",
}


def time_c_relay(
    bootstrap: str, topic: str, partitions: int, messages: int, variant: str
) -> RelayRun:
    """The reference without Python: `kcat -C` reading the pre-loaded `topic` piped into
    `kcat -P` writing a fresh output topic (librdkafka both; values only, one per line; the
    producer with the sidecar's producer properties, `KCAT_PRODUCER`)."""
    import uuid

    from sidecar.bench.workload import create_topic
    from sidecar.kafka import plain_consumer

    kcat = shutil.which("kcat")
    if kcat is None:
        raise InputError("bench relay: the C relay row needs kcat on PATH (apt install kcat)")
    run_id = uuid.uuid4().hex[:8]
    output = f"{topic}.{run_id}"
    create_topic(bootstrap, output, partitions)
    settings = [arg for key, value in KCAT_PRODUCER.items() for arg in ("-X", f"{key}={value}")]
    watcher = plain_consumer(bootstrap, f"bench-watch-{run_id}")
    # -e: the consumer exits at the end of the topic, flushing its buffered output; the
    # producer then flushes and exits on end of input.
    reader = subprocess.Popen(
        [kcat, "-C", "-q", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e"],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert reader.stdout is not None
    writer = subprocess.Popen(
        [kcat, "-P", "-q", "-b", bootstrap, "-t", output, *settings],
        stdin=reader.stdout,
    )
    reader.stdout.close()  # the writer holds the pipe now
    window = _watch([reader, writer], watcher, output, partitions, messages, variant)
    for status in window.statuses:
        code = os.waitstatus_to_exitcode(status)
        # Stopped by SIGTERM once everything was relayed, or ended on its own.
        if code not in (0, -signal.SIGTERM):
            raise InputError(f"bench relay: {variant} (kcat) exited {code}")
    return window.run(variant, messages)


def _watch(
    procs: Sequence[subprocess.Popen[bytes]],
    watcher: Any,
    output: str,
    partitions: int,
    messages: int,
    variant: str,
) -> _Window:
    """Watch the output topic until it holds `messages` records, then stop the relay's
    processes; their CPU is sampled when the first output record is seen and when the last is."""
    pids = [p.pid for p in procs]
    first = last = 0.0
    first_count = 0
    cpu_first = cpu_last = None
    statuses: list[int] = []
    usages: list[Any] = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                done = _output_count(watcher, output, partitions)
            except Exception:  # the output topic does not exist yet
                done = 0
            now = time.monotonic()
            if done and not first:
                cpu_first = tree_cpu(pids)
                first, first_count = now, done
            if done >= messages:
                cpu_last = tree_cpu(pids)
                last = now
                break
            time.sleep(0.05)
    finally:
        for proc in procs:
            # os.kill, not Popen.send_signal: that polls first, reaping a process that ended
            # (kcat at the end of its input) and losing its usage. An unreaped one ignores it.
            os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            statuses.append(status)
            usages.append(usage)
        watcher.close()
    if not last:
        raise InputError(f"bench relay: {variant} did not relay {messages} records in time")
    return _Window(statuses, usages, first, last, first_count, cpu_first, cpu_last)
