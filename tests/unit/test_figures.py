"""The figures page generator (`python -m sidecar.bench.figures`, `make figures`): every
benchmark's JSON, in the shape its own writer gives it, becomes Markdown tables with medians and
[min–max] as the benchmark prints them, under a section naming the command, the date and the
commit; the page's other sections are kept.

The documents are built here with the benchmarks' own result types and `to_dict`s, and written
by `write_bench_results`, the one writer every `zdict-sidecar bench` command uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sidecar.bench import figures
from sidecar.bench.choice import ChoiceRow
from sidecar.bench.codec import BatchRow, CodecResult, RelayRun, Speed, result_dict
from sidecar.bench.figure_tables import spread
from sidecar.bench.lifecycle import COST_SCHEDULE, CostRound, LifecycleResults, results_dict
from sidecar.bench.producer import ProducerResults, SizeResult
from sidecar.bench.proxy import CLIENT, PARTS, RATE, WARMUP, Part, ProxyResults, Stored
from sidecar.bench.proxy_tables import VARIANT_PREFIX
from sidecar.bench.registry import Level, Reading, RegistryResults
from sidecar.bench.registry import results_dict as registry_results
from sidecar.bench.relay import C_RELAY, PASS_THROUGH, KindResults, LatencyRun
from sidecar.bench.savings import PATHS, CorpusSavings, Fill
from sidecar.bench.storage import StorageResults, Variant
from sidecar.bench.wire import SAMPLE_IDS, WrongDictionary, header_options
from sidecar.bench.workload import DEMO_SETTINGS, DriftRun
from sidecar.cli.common import write_bench_results
from sidecar.cli.main import build_parser
from sidecar.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
WRITTEN = datetime(2026, 12, 6, 14, 3, tzinfo=UTC)

#: (benchmark, its settings, its JSON-ready results), as each `cmd_bench_*` passes them.
Written = tuple[str, Any, Any]


def codec() -> Written:
    result = CodecResult(
        label="product_viewed",
        messages=80_000,
        mean_size=112.6,
        dict_bytes=65_536,
        level=3,
        ratio_with_header=2.0951,
        ratio_frames_only=2.36,
        nodict_ratio=1.0342,
        speeds={
            "encoder.encode_batch (relay path)": Speed(215_775, 207_754, 216_348),
            "decoder.decode": Speed(165_195, 156_302, 166_800),
        },
        native={
            "compress_msg_per_s": 217_325.0,
            "decompress_msg_per_s": 900_000.0,
            "ratio_frames_only": 2.3,
            "zstd_cli": "zstd 1.5.7",
        },
        batches=[
            BatchRow(
                fill,
                {"raw none": raw, "raw zstd": zstd, "sidecar none": ours},
                {"zstd": Speed(62_345, 60_000, 63_000)},
            )
            for fill, raw, zstd, ours in ((1, 182.6, 185.1, 121.9), (8, 129.2, 67.2, 68.5))
        ],
        oracle={3: 25.3, 19: 18.7},
        encode_vs_batch_api=0.56,
    )
    return "codec", {"runs": 3, "count": 100_000, "seed": 1}, [result_dict(result)]


def relay() -> Written:
    def run(name: str, seconds: float, cpu: float) -> RelayRun:
        return RelayRun(name, 400_000, seconds, 9.0, 150 * 2**20, 0, cpu, 400_000)

    results = KindResults("product_viewed", 400_000, 112.6, 4)
    results.saturation[C_RELAY] = [run(C_RELAY, 2.0, 1.0), run(C_RELAY, 1.6, 0.94)]
    results.saturation[PASS_THROUGH] = [run(PASS_THROUGH, 4.0, 1.8), run(PASS_THROUGH, 3.2, 1.4)]
    results.saturation["compress, 1 worker"] = [run("c", 5.0, 2.4), run("c", 4.0, 2.0)]
    results.latency["compress, 1 worker @ 20,000/s"] = [
        LatencyRun("c", 20_000.0, 6.0, achieved_rate=19_978, p50_ms=9.2, p99_ms=17.4, max_ms=37),
        LatencyRun("c", 20_000.0, 6.0, achieved_rate=19_990, p50_ms=9.6, p99_ms=18.9, max_ms=41),
    ]
    args = build_parser().parse_args(
        ["bench", "relay", "--kind", "product_viewed", "-n", "400000", "--latency-rate", "20000"]
    )
    return "relay", vars(args) | {"func": None, "argv": None}, [results.to_dict()]


def storage() -> Written:
    fills = (1, 8)
    sizes = {
        ("raw", "none"): (182.4, 129.0),
        ("raw", "zstd"): (180.7, 67.8),
        ("sidecar", "none"): (122.5, 69.1),
        ("sidecar", "zstd"): (122.5, 66.9),
        ("raw", "lz4"): (182.4, 87.9),
        ("sidecar", "lz4"): (122.5, 68.4),
    }
    variants = []
    for (source, codec_name), per_fill in sizes.items():
        for fill, size in zip(fills, per_fill, strict=True):
            stored = round(size * 4096)
            variants.append(
                Variant(
                    f"{source} {codec_name} {fill}",
                    source,
                    codec_name,
                    fill,
                    messages=4096,
                    stored_bytes=stored,
                    batches=4096 // fill,
                    predicted_bytes=stored if codec_name == "none" else None,
                    broker_cpu_seconds=[0.4, 0.37],
                )
            )
    for codec_name, size in (("none", 62.5), ("zstd", 51.3), ("lz4", 55.1)):
        variants.append(
            Variant(f"own {codec_name}", "sidecar", codec_name, None, 4096, round(size * 4096), 10)
        )
    settings = {
        "kind": "product_viewed",
        "count": 4096,
        "partitions": 8,
        "runs": 3,
        "fills (batch.num.messages)": list(fills),
        "data_dir": "deploy/kafka/.cache/run/data",
        "broker_pid": 1234,
    }
    results = StorageResults("product_viewed", 4096, 4096 * 112, variants, settings)
    return "storage", results.settings, results.to_dict()


def producer() -> Written:
    size = SizeResult(
        "~100 B",
        "product_viewed",
        112.0,
        32768,
        2.1,
        plain_us=[0.76, 0.5, 0.78],
        header_us=[0.8, 0.6, 0.9],
        zdict_us=[4.79, 4.43, 5.45],
        plain_cpu_us=[0.7, 0.5, 0.7],
        zdict_cpu_us=[4.6, 4.0, 5.2],
        encode_us=[2.37, 2.02, 2.48],
        zstd_us=[2.08, 1.38, 2.23],
        stored={
            1: {"raw none": 182.6, "raw zstd": 181.2, "zdict none": 121.5, "zdict zstd": 121.5}
        },
    )
    results = ProducerResults(50_000, 3, (1,), [size])
    return "producer", results.settings, results.to_dict()


def proxy() -> Written:
    parts = {name: Part(name) for name in PARTS}
    for path, per_s, cpu in (("direct", 76_596.0, 0.0), ("proxy", 24_931.0, 0.8)):
        part = parts[f"produce, {path}"]
        part.records = [100_000] * 3
        part.records_per_s = [per_s, per_s * 0.9, per_s * 1.1]
        part.proxy_cpu_s = [cpu, cpu * 1.25, cpu * 0.8]
    parts["produce, proxy"].produce_requests = [400, 500, 250]
    for path, p50, p99, cpu in (("direct", 4.6, 40.2, 0.0), ("proxy", 5.2, 44.4, 0.4)):
        part = parts[f"latency, {path}"]
        part.records = [49_900] * 3
        part.records_per_s = [4_990.0] * 3
        part.proxy_cpu_s = [cpu, cpu, cpu * 1.5]
        part.p50_ms, part.p99_ms = [p50, p50 + 1, p50 - 1], [p99, p99 + 10, p99 - 10]
    parts["latency, proxy"].produce_requests = [9_980, 12_475, 4_990]
    # Java's whole milliseconds, its records the warm-up's too.
    for path, p50, p99, cpu in (("direct", 5, 10, 0.0), ("proxy", 6, 12, 0.25)):
        part = parts[f"java, {path}"]
        part.records = [50_000] * 3
        part.records_per_s = [4_990.0, 4_985.0, 4_995.0]
        part.proxy_cpu_s = [cpu, cpu * 1.2, cpu * 0.8]
        part.p50_ms, part.p99_ms = [p50, p50, p50 + 1], [p99, p99 + 1, p99 + 2]
    parts["java, proxy"].produce_requests = [2_000, 2_500, 1_000]
    # The broker's CPU in the same rounds: 1.0 s direct, 0.8 s through the proxy.
    parts["java, direct"].broker_cpu_s = [1.0, 1.0, 1.25]
    parts["java, proxy"].broker_cpu_s = [0.8, 0.8, 0.8]
    # A variant (`--variant`) in the same rounds: 6.0, 7.2 and 4.0 µs against 5.0, 6.0, 4.0.
    variant = parts[VARIANT_PREFIX + "ZDICT_PURE_PYTHON=1"] = Part("variant")
    variant.records = [50_000] * 3
    variant.proxy_cpu_s = [0.3, 0.36, 0.2]
    for path, per_s, cpu in (("direct", 530_000.0, 0.0), ("proxy", 129_000.0, 0.5)):
        part = parts[f"fetch, {path}"]
        part.records = [100_000] * 3
        part.records_per_s = [per_s] * 3
        part.proxy_cpu_s = [cpu] * 3
    stored = Stored(64, 16)
    for path, size in (("direct", 57_000), ("proxy", 57_000), ("frames", 62_100)):
        stored.stored_bytes[path] = [size] * 3
        stored.records[path] = [1_000] * 3
        stored.batches[path] = [64] * 3
    settings = {
        "kind": "product_viewed",
        "count": 100_000,
        "rate": RATE,
        "seconds": 10.0,
        "partitions": 4,
        "sparse_partitions": 64,
        "fills": [16],
        "batches": 2,
        "runs": 3,
        "client": CLIENT,
        "java": {
            "records": 50_000,
            "warmup_records": 10_000,
            "payloads": 4096,
            "client": {"linger.ms": 5, "acks": "all"},
        },
        "warmup": WARMUP,
        "data_dir": "deploy/kafka/.cache/run/data",
        "variants": ["ZDICT_PURE_PYTHON=1"],
    }
    results = ProxyResults(settings, parts, [stored], {"dict_id": 32768, "heldout_ratio": 2.1})
    return "proxy", results.settings, results.to_dict()


def registry() -> Written:
    levels = []
    for n, seconds, rss in ((100, 0.8, 80.0), (1_000, 1.8, 160.0)):
        level = Level(n, n * 66_000, n / 100)
        for run in range(3):
            read = n * 66_000 + run
            proxy = Reading(seconds + run / 10, rss, read, store_bytes=n * 660, store_files=n // 50)
            level.readings["proxy_1"].append(proxy)
            level.readings["proxy_all"].append(proxy)
            level.readings["consumer"].append(Reading(seconds, rss, read, older_s=0.002))
            level.readings["dicts_list"].append(Reading(seconds, rss, read))
        levels.append(level)
    settings = {"levels": [100, 1_000], "namespaces": 100, "size": 65_536, "runs": 3}
    bases = [{"namespace": "order", "size": 65_536}]
    return "registry", settings, registry_results(RegistryResults(settings, bases, levels))


def lifecycle() -> Written:
    drift = DriftRun(5000, 90.0, 45.0, first_dictionary=10.0, detected=52.2, switched=60.3)
    drift.recovered, drift.heldout_ratio, drift.pre_ratio = 63.0, 1.88, 1.8
    drift.dip_ratio, drift.post_ratio, drift.produced, drift.decoded = 1.18, 3.44, 450_500, 450_500
    drift.trainings = [{"seconds": 6.6, "cpu_seconds": 5.2}, {"seconds": 4.6, "cpu_seconds": 3.4}]
    cost = [
        CostRound(2_000_000, 30.0, 3, [seconds], [active], [idle], 80.0, training_cpu)
        for seconds, active, idle, training_cpu in (
            (11.6, 61_501.0, 64_997.0, 19.8),
            (10.6, 61_415.0, 60_745.0, 19.6),
            (13.0, 64_273.0, 65_915.0, 23.1),
        )
    ]
    settings = {
        "drift": {"rate": 5000, "seconds": 90.0, "drift_after": 45.0, **DEMO_SETTINGS},
        "cost": {"messages": 2_000_000, "partitions": 4, **COST_SCHEDULE},
        "work_dir": "/tmp/zdict-bench-lifecycle-x",
    }
    results = LifecycleResults([drift], cost, 2_000_000, settings)
    return "lifecycle", results.settings, results_dict(results)


def choice() -> Written:
    row = ChoiceRow(
        "dpkg-log", "log lines", 5256, 68.4, 359_510, 250_530, 296_870, "16 KiB, level 3",
        "promoted", 2048, 3, 1.2,
    )  # fmt: skip
    return "choice", {"limit": 20_000, "corpora": None}, [row.to_dict()]


def savings() -> Written:
    corpus = CorpusSavings("go-api", "API listing lines, ~80 B", 52.2, 2000)
    corpus.fills = [
        Fill(
            1,
            2,
            {"direct": 240, "frames": 230, "proxy": 230, "producer": 240},
            {p: 2 for p in PATHS},
        ),
        Fill(
            512,
            1024,
            {"direct": 9000, "frames": 20000, "proxy": 9100, "producer": 9000},
            {p: 2 for p in PATHS},
        ),
    ]
    corpus.skipped_fills = [4096]
    settings = {
        "corpora": ["go-api"],
        "limit": 20_000,
        "fills": [1, 512, 4096],
        "sample": 2000,
        "batches": 2,
        "min_records": 512,
        "target": 1.02,
        "data_dir": "deploy/kafka/.cache/run/data",
    }
    return "savings", settings, [corpus.to_dict()]


def wire() -> Written:
    headers = [{name: getattr(h, name) for name in h.__slots__} for h in header_options()]
    frames = {
        "product_viewed": [
            ["product_viewed", "standard: magic, dictionary id, content size", 53.86],
            ["product_viewed", "- magic too (compact)", 47.86],
        ]
    }
    wrong = WrongDictionary(100_000, Counter({"zstd refused": 98_720, "fingerprint caught": 1_020}))
    settings = {"count": 60_000, "kinds": ["product_viewed"], "corpora": None, "pairs": 100_000}
    results = {"headers": headers, "frames": frames, "wrong_dictionary": wrong.to_dict()}
    return "wire", settings, results


#: Each benchmark's document, and what its rendering must show (as the benchmark prints it).
CASES: dict[str, tuple[Callable[[], Written], list[str]]] = {
    "codec": (
        codec,
        [
            "| `encoder.encode_batch (relay path)` | 215,775 [207,754–216,348] | 0.99 |",
            "| `zstd -b` (native CLI) | 217,325 | 1.00 |",
            "| product_viewed | 80,000 | 112.6 | 64 KiB | 3 | 2.095 | 2.360 | 1.034 |",
            "| 1 | 182.6 (1.00×) | 185.1 (0.99×) | 121.9 (1.50×) | 62,345 [60,000–63,000] |",
            "crossover, producer zstd: stores fewer bytes than the sidecar's records from ~",
            "level 3: 25.3 B, level 19: 18.7 B",
        ],
    ),
    "relay": (
        relay,
        [
            "| C relay (kcat -C \\| kcat -P) | 225,000 [200,000–250,000] | 2.00 | "
            "2.42 [2.35–2.50] | 1.00 | 150 | 0 |",
            "| pass-through, 1 worker | 112,500 [100,000–125,000] | 1.00 | 4.00 [3.50–4.50] | "
            "1.65 |",
            "| compress, 1 worker | 90,000 [80,000–100,000] | 0.80 | 5.50 [5.00–6.00] | 2.27 |",
            "| compress, 1 worker @ 20,000/s | 19,984 [19,978–19,990] | 9.4 [9.2–9.6] | "
            "18.1 [17.4–18.9] | 39 [37–41] |",
        ],
    ),
    "storage": (
        storage,
        [
            "| 1 | 182.4 (0.61×) | 180.7 (0.62×) | 182.4 (0.61×) | **122.5 (0.91×)** | "
            "**122.5 (0.91×)** | **122.5 (0.91×)** | 94/94/94 · 94/94/94 |",
            "| 8 | 129.0 (0.87×) | 67.8 (1.65×) | 87.9 (1.27×) | 69.1 (1.62×) | **66.9 (1.67×)** |",
            "own producer, full speed (410 / 410 / 410 per batch) |  |  |  | 62.5 (1.79×) | "
            "51.3 (2.18×) | 55.1 (2.03×) | · –/–/– |",
            "Kafka's record format at every fill: yes",
            "- crossover, producer zstd: stores fewer bytes than the sidecar's records from ~7.6",
            "- crossover, producer lz4: not within 8 records per batch",
        ],
    ),
    "producer": (
        producer,
        [
            "| ~100 B (`product_viewed`, 112 B) | 0.76 [0.50–0.78] | 4.79 [4.43–5.45] | "
            "4.03 [3.93–4.67] |",
            "| 1 | 182.6 | 181.2 | 121.5 | 121.5 (1.49×) |",
        ],
    ),
    "proxy": (
        proxy,
        [
            "| produce, unthrottled: records/s (100,000 events, 4 partitions) | "
            "76,596 [68,936–84,256] | 24,931 [22,438–27,424] |",
            "| proxy CPU µs per record |  | 8.0 [6.4–10.0] |",
            "| records per proxy CPU second (target ≥ 100,000) |  | 125,000 [100,000–156,250] |",
            "| records per Produce request, unthrottled (records ÷ the Produce requests the proxy "
            "forwarded) |  | 250.0 [200.0–400.0] |",
            "| at 5,000 records/s, Java producer-perf-test (issue 26's client, no compression) "
            "|  |  |",
            "| records/s, the 40,000 after 10,000 warm-up records | 4,990 [4,985–4,995] | "
            "4,990 [4,985–4,995] |",
            "| p50 ms, send() → callback (Java: whole ms) | 5 [5–6] | 6 [6–7] |",
            "| p50 added by the proxy, ms (target ≤ +1) |  | +1 [+1–+1] |",
            "| p99 added by the proxy, ms (target ≤ +5) |  | +2 [+2–+2] |",
            "| records per Produce request, Java (records ÷ the Produce requests the proxy "
            "forwarded) |  | 25.0 [20.0–50.0] |",
            "| proxy CPU µs per record, warm-up records included (target ≤ 10) |  | "
            "5.0 [4.0–6.0] |",
            "| proxy CPU µs per record with ZDICT_PURE_PYTHON=1, in the same rounds |  | "
            "6.0 [4.0–7.2] |",
            "| with ZDICT_PURE_PYTHON=1 ÷ the proxy's, per round |  | 1.20 [1.00–1.20] |",
            "| at 5,000 records/s, librdkafka client (producer zstd; no target: not the issue's "
            "client) |  |  |",
            "| p50 added by the proxy, ms |  | +0.6 [+0.6–+0.6] |",
            "| records per Produce request, librdkafka (records ÷ the Produce requests the proxy "
            "forwarded) |  | 5.0 [4.0–10.0] |",
            "| proxy CPU µs per record, librdkafka |  | 8.0 [8.0–12.0] |",
            "| records decoded per proxy CPU second (target ≥ 150,000) |  | "
            "200,000 [200,000–200,000] |",
            "| 64 | 16 | 57.0 [57.0–57.0] | 62.1 [62.1–62.1] | 57.0 [57.0–57.0] | "
            "15.6 [15.6–15.6] | 1.000 [1.000–1.000] |",
        ],
    ),
    "registry": (
        registry,
        [
            "| dictionaries in the registry | 100 | 1,000 | 36,500 (projected) | "
            "issue 38 at 10,000 |",
            "| proxy, 1 topic: start, s | 0.90 [0.80–1.00] | 1.90 [1.80–2.00] | ~41.34 | ≤ 3 |",
            "| proxy, 1 topic: read / registry | 100.0% [100.0%–100.0%] | "
            "100.0% [100.0%–100.0%] |  | ≤ 5 % |",
            "| `dicts list --registry`: peak RSS, MiB | 80 [80–80] | 160 [160–160] | ~3,316 | "
            "≤ 200 |",
        ],
    ),
    "lifecycle": (
        lifecycle,
        [
            "| 1 | 10.0 s | +7.2 s | +15.3 s | +18.0 s | 1.88 / 1.80 / 1.18 / 3.44 | "
            "450,500 / 450,500 |",
            "- training runs beside the relay: 2, 5.6 [4.6–6.6] s wall, 4.3 [3.4–5.2] CPU seconds",
            "| msg/s while a training run is under way | 61,501 [61,415–64,273] |",
            "| ratio active / idle, within each run | 0.98 [0.95–1.01] |",
        ],
    ),
    "choice": (
        choice,
        [
            "| dpkg-log | 5,256 | 68.4 | 1.435 | 1.211 | 1.185 | 2 KiB, 3 | 16 KiB, level 3 |",
            "Ours / naive: median 1.185, min 1.185, max 1.185 over 1 corpora.",
        ],
    ),
    "savings": (
        savings,
        [
            "- through the proxy: at most 1.02× the better at 2 of 2 fills; the worst 1.011×",
            "- through the in-process producer: at most 1.02× the better at 1 of 2 fills; the "
            "worst 1.044×",
            "| go-api (52 B, 2,000) | 1 · 1.044 | 1.011 · 1 | – |",
            "| go-api (52 B, 2,000) | 0.958 · 1 | 1.011 · 1 | – |",
        ],
    ),
    "wire": (
        wire,
        [
            "| header | key | " + " | ".join(f"id {i}" for i in SAMPLE_IDS) + " | note |",
            "| compact tag (fingerprint + varint) | `zd` | 6 | 7 | 8 |",
            "| product_viewed | 53.86 | 47.86 |",
            "| zstd refused | 98,720 | 98.72% |",
        ],
    ),
}


def written(tmp_path: Path, name: str, document: Written) -> Path:
    """`document` written as its benchmark writes it, dated `WRITTEN`."""
    path = tmp_path / f"bench-{name}.json"
    write_bench_results(*document, str(path))
    os.utime(path, (WRITTEN.timestamp(), WRITTEN.timestamp()))
    return path


@pytest.mark.parametrize("name", list(CASES))
def test_each_benchmarks_json_renders_as_the_benchmark_prints_it(name: str, tmp_path: Path) -> None:
    build, expected = CASES[name]
    source = figures.load(written(tmp_path, name, build()))
    section = figures.render_part(source, "abc1234")
    assert section.startswith(f"### `bench-{name}.json`\n")
    for text in expected:
        assert text in section


def test_every_benchmark_has_a_case() -> None:
    assert set(CASES) == set(figures.BENCHES)


def checkout_commit() -> str:
    """`git describe --always --dirty` of this checkout."""
    return subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_provenance_names_the_command_the_date_the_commits_and_the_machine(
    tmp_path: Path,
) -> None:
    source = figures.load(written(tmp_path, "relay", relay()))
    line = figures.provenance(source, "4b20d49-dirty")
    assert (
        "`zdict-sidecar bench relay --kind product_viewed -n 400000 --partitions 4 --runs 3 "
        f"--latency-rate 20000 --latency-seconds 6.0` at commit {checkout_commit()}, "
        "2026-12-06 14:03 UTC (rendered at 4b20d49-dirty);" in line
    )
    assert f"CPUs: {os.cpu_count()}" in line and "libzstd" in line


def test_the_provenance_says_when_the_json_records_no_commit(tmp_path: Path) -> None:
    path = written(tmp_path, "relay", relay())
    document = json.loads(path.read_text())
    del document["environment"]["commit"]  # written before benchmarks recorded their commit
    path.write_text(json.dumps(document))
    line = figures.provenance(figures.load(path), "4b20d49")
    assert "at commit unrecorded, " in line and "(rendered at 4b20d49)" in line


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ("codec", "zdict-sidecar bench codec --kind product_viewed -n 100000 --seed 1 --runs 3"),
        (
            "storage",
            "zdict-sidecar bench storage --kind product_viewed -n 4096 --partitions 8 --runs 3 "
            "--fills 1,8 --data-dir deploy/kafka/.cache/run/data",
        ),
        ("producer", "zdict-sidecar bench producer -n 50000 --runs 3 --fills 1"),
        (
            "proxy",
            "zdict-sidecar bench proxy --kind product_viewed -n 100000 --seconds 10.0 "
            "--partitions 4 --runs 3 --fills 16 --batches 2 "
            "--data-dir deploy/kafka/.cache/run/data --variant ZDICT_PURE_PYTHON=1",
        ),
        (
            "lifecycle",
            "zdict-sidecar bench lifecycle --runs 1 --rate 5000 --seconds 90.0 --drift-after 45.0 "
            "--cost-rounds 3 --cost-messages 2000000",
        ),
        ("choice", "zdict-sidecar bench choice --limit 20000"),
        (
            "registry",
            "zdict-sidecar bench registry --levels 100,1000 --namespaces 100 --size 65536 --runs 3",
        ),
        (
            "savings",
            "zdict-sidecar bench savings --corpus go-api --limit 20000 --fills 1,512,4096 "
            "--data-dir deploy/kafka/.cache/run/data",
        ),
        ("wire", "zdict-sidecar bench wire -n 60000 --kind product_viewed --pairs 100000"),
    ],
)
def test_the_command_is_rebuilt_from_the_settings(name: str, command: str, tmp_path: Path) -> None:
    source = figures.load(written(tmp_path, name, CASES[name][0]()))
    assert figures.command(source) == command


def test_every_rebuilt_command_parses(tmp_path: Path) -> None:
    for name, (build, _) in CASES.items():
        command = figures.command(figures.load(written(tmp_path, name, build())))
        build_parser().parse_args(command.split()[1:])


HAND_KEPT = """# Figures: an older preamble

## bench relay

*Hand-kept.* 87,702 msg/s, typed by hand.

## make evaluate

*Hand-kept.* Ratio 2.095.

## bench choice

*Hand-kept.* Median 1.039.

## bench registry

### `bench-registry.json`

An earlier rendering.
"""


def test_the_page_holds_a_section_per_benchmark_and_only_rendered_figures(
    tmp_path: Path,
) -> None:
    sources = [
        figures.load(written(tmp_path, "wire", wire())),
        figures.load(written(tmp_path, "relay", relay())),
    ]
    page = figures.render_page(sources, HAND_KEPT, "abc1234")
    assert page.startswith(figures.PREAMBLE + "\n\n## bench codec\n")
    assert "older preamble" not in page and "Hand-kept" not in page
    assert "## make evaluate" not in page
    assert [title for title, _ in figures.split_sections(page)] == [
        figures.section_title(name) for name in figures.BENCHES
    ]
    assert "## bench wire\n\n### `bench-wire.json`" in page
    assert "## bench relay\n\n### `bench-relay.json`" in page
    # A section an earlier run rendered stays; one typed by hand says what fills it.
    assert "## bench registry\n\n### `bench-registry.json`\n\nAn earlier rendering." in page
    assert "## bench choice\n\nNot measured yet: `zdict-sidecar bench choice`" in page
    assert page.endswith("\n") and not page.endswith("\n\n")


def test_several_files_of_one_benchmark_share_its_section(tmp_path: Path) -> None:
    first = written(tmp_path, "relay", relay())
    second = first.with_name("bench-relay-order.json")
    second.write_bytes(first.read_bytes())
    page = figures.render_page([figures.load(first), figures.load(second)], "", "abc")
    assert page.count("## bench relay") == 1
    assert page.index("### `bench-relay-order.json`") < page.index("### `bench-relay.json`")


def test_a_json_of_no_known_benchmark_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench-other.json"
    path.write_text(json.dumps({"benchmark": "other", "settings": {}, "results": []}))
    with pytest.raises(InputError, match=r"bench-other\.json: not the JSON of a known benchmark"):
        figures.render_page([figures.load(path)], "", "abc")


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"results": []}'])
def test_a_file_that_is_no_benchmark_json_is_refused(text: str, tmp_path: Path) -> None:
    path = tmp_path / "bench-x.json"
    path.write_text(text)
    with pytest.raises(InputError, match=r"bench-x\.json"):
        figures.load(path)


def test_main_writes_the_page_from_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "FIGURES.md"
    page.write_text(HAND_KEPT)
    json_file = written(tmp_path, "choice", choice())
    assert figures.main([str(json_file), "--out", str(page), "--commit", "abc1234"]) == 0
    text = page.read_text()
    assert "(rendered at abc1234)" in text and "## make evaluate" not in text
    assert "wrote" in capsys.readouterr().out


def test_main_without_files_fails_naming_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert figures.main(["--out", str(tmp_path / "FIGURES.md")]) == 1
    assert "run the benchmarks first (make bench)" in capsys.readouterr().err
    assert not (tmp_path / "FIGURES.md").exists()


def test_the_committed_page_has_a_section_for_every_benchmark_and_no_other() -> None:
    page = (ROOT / "sidecar" / "bench" / "FIGURES.md").read_text(encoding="utf-8")
    assert page.startswith(figures.PREAMBLE + "\n")
    titles = [title for title, _ in figures.split_sections(page)]
    assert titles == [figures.section_title(name) for name in figures.BENCHES]


def test_the_generator_loads_no_kafka_client() -> None:
    code = (
        "import sys, sidecar.bench.figures; print(sorted(m for m in sys.modules if 'kafka' in m))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("values", "fmt", "text"),
    [
        ([], "{:.1f}", "–"),
        ([4.03], "{:.2f}", "4.03"),
        ([3.67, 4.96, 4.03], "{:.2f}", "4.03 [3.67–4.96]"),
        ([-0.2, 0.1, 0.3], "{:+.1f}", "+0.1 [-0.2–+0.3]"),
        ([110_320, 106_952, 124_455], "{:,.0f}", "110,320 [106,952–124,455]"),
    ],
)
def test_a_spread_is_the_median_and_its_range(values: list[float], fmt: str, text: str) -> None:
    assert spread(values, fmt) == text


def test_bench_proxy_prints_the_tables_figures_md_renders_with_their_targets() -> None:
    from sidecar.bench.proxy import format_results
    from sidecar.bench.proxy_tables import proxy_tables

    _, settings, document = proxy()
    parts = {name: Part(**part) for name, part in document["parts"].items()}
    stored = [Stored(**entry) for entry in document["stored"]]
    printed = format_results(ProxyResults(settings, parts, stored, document["dictionary"]))
    # One builder: every cell of FIGURES.md's two tables is printed, on one line per row.
    tables = proxy_tables({"settings": settings, "results": document})
    for row in [*tables.timed, *tables.stored]:
        cells = [str(cell) for cell in row if cell != ""]
        assert any(all(cell in line for cell in cells) for line in printed.splitlines()), row
    assert "records per proxy CPU second (target ≥ 100,000)" in printed
    assert "8.0 [6.4–10.0]" in printed and "125,000 [100,000–156,250]" in printed
    assert "records decoded per proxy CPU second (target ≥ 150,000)" in printed
    assert "proxy / smaller: target ≤ 1.03" in printed
    assert "1.000" in printed.splitlines()[-1]
    # Issue 26's targets at 5,000 records/s are on the Java rows only.
    targeted = [line for line in printed.splitlines() if "target ≤ +" in line]
    assert len(targeted) == 2 and "+1 [+1–+1]" in targeted[0] and "+2 [+2–+2]" in targeted[1]
    assert "warm-up records included (target ≤ 10)" in printed and "5.0 [4.0–6.0]" in printed


def test_savings_through_both_paths_share_a_cell_where_they_differ() -> None:
    from sidecar.bench.savings_tables import savings_tables

    corpus = CorpusSavings("go-api", "API listing lines, ~80 B", 52.2, 2000)
    stored = {"direct": 240, "frames": 230, "proxy": 230, "relay": 253}
    corpus.fills = [Fill(1, 2, stored, {p: 2 for p in (*PATHS, "relay")})]
    settings = {**savings()[1], "fills": [1]}
    text = "\n".join(savings_tables({"settings": settings, "results": [corpus.to_dict()]}))
    assert "| go-api (52 B, 2,000) | 1 · 1.100 |" in text
    assert "- through the relay: at most 1.02× the better at 0 of 1 fills; the worst 1.100×" in text
    assert "through the proxy · the relay, its producer batching the fill" in text


def test_a_bench_proxy_json_from_before_the_java_part_renders_saying_so() -> None:
    from sidecar.bench.proxy_tables import proxy_markdown

    _, settings, document = proxy()
    del settings["java"], document["parts"]["java, direct"], document["parts"]["java, proxy"]
    markdown = "\n".join(proxy_markdown({"settings": settings, "results": document}))
    assert "| at 5,000 records/s, Java producer-perf-test: not in this JSON" in markdown
    assert "| p50 added by the proxy, ms |  | +0.6 [+0.6–+0.6] |" in markdown
    assert "target ≤ +" not in markdown


def test_the_java_part_shows_the_brokers_cpu_in_the_same_rounds_and_the_proxys_over_it() -> None:
    from sidecar.bench.proxy_tables import proxy_markdown

    _, settings, document = proxy()
    markdown = "\n".join(proxy_markdown({"settings": settings, "results": document}))
    # 1.0 s (1.25 s in one round) for 50,000 records directly, 0.8 s through the proxy.
    assert (
        "| the broker's CPU µs per record meanwhile (the same run's reference) "
        "| 20.0 [20.0–25.0] | 16.0 [16.0–16.0] |"
    ) in markdown
    # The proxy's 0.25, 0.3, 0.2 s over the broker's direct 1.0, 1.0, 1.25 s.
    assert (
        "| proxy CPU ÷ the broker's CPU written directly, per round |  | 0.25 [0.16–0.30] |"
    ) in markdown


def test_a_bench_proxy_json_without_the_brokers_cpu_renders_it_not_measured() -> None:
    from sidecar.bench.proxy_tables import proxy_markdown

    _, settings, document = proxy()
    for part in document["parts"].values():
        del part["broker_cpu_s"]  # written before the bench read it
    document["parts"]["java, proxy"]["broker_cpu_s"] = []  # or run without the broker's pid
    markdown = "\n".join(proxy_markdown({"settings": settings, "results": document}))
    rows = [line for line in markdown.splitlines() if "the broker's CPU" in line]
    assert len(rows) == 2
    assert rows[0].endswith("| not measured | not measured |")
    assert rows[1].endswith("|  | not measured |")


def test_a_bench_proxy_json_from_before_the_request_counts_renders_them_not_measured() -> None:
    from sidecar.bench.proxy_tables import proxy_markdown

    _, settings, document = proxy()
    for part in document["parts"].values():
        del part["produce_requests"]
    markdown = "\n".join(proxy_markdown({"settings": settings, "results": document}))
    rows = [line for line in markdown.splitlines() if "records per Produce request" in line]
    clients = ("unthrottled", "Java", "librdkafka")
    assert [row.split(" (")[0] for row in rows] == [
        f"| records per Produce request, {client}" for client in clients
    ]
    assert all(row.endswith("|  | not measured |") for row in rows)
    # The rest renders as before.
    assert "| proxy CPU µs per record, librdkafka |  | 8.0 [8.0–12.0] |" in markdown
    assert "| records per proxy CPU second (target ≥ 100,000) |  | 125,000 [100,000–156,250] |" in (
        markdown
    )
