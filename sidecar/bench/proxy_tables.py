"""`bench proxy`'s tables from its JSON: built once, printed by the bench (sidecar/bench/proxy.py)
and rendered on FIGURES.md (`sidecar.bench.figures`).

`proxy_tables(doc)` builds the rows of both tables (the timed parts, direct and through the
proxy; the bytes stored at each client fill) from the document `bench proxy --json-out` writes;
`proxy_flags` and `proxy_markdown` are FIGURES.md's section. Figures are medians with [min–max]
of the measured rounds (`spread`). Issue 26's targets at 5,000 records/s are judged on the Java
producer-perf-test part (the issue's client), next to the broker's own CPU in the same rounds
when the bench had its pid; the librdkafka part is shown without a target. A document written
before the Java part shows a row saying so; one written before the bench counted the proxy's
Produce requests or read the broker's CPU shows those rows as not measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sidecar.bench.figure_tables import Document, flag, spread, table

#: Milliseconds, µs and bytes per record as `bench proxy` gives them.
MS: Final = "{:.1f}"
#: Java's latencies: whole milliseconds (a median of an even count may end in .5).
JAVA_MS: Final = "{:g}"
#: Records per Produce request.
PER_REQUEST: Final = "{:,.1f}"
#: The row of records per Produce request in a part, by its client.
PER_REQUEST_ROW: Final = (
    "records per Produce request, {client} (records ÷ the Produce requests the proxy forwarded)"
)
#: A variant's Java part is named this and its `NAME=VALUE` (`bench proxy --variant`).
VARIANT_PREFIX: Final = "java, proxy with "
#: Its cell for a document written before the bench counted the requests.
NOT_MEASURED: Final = "not measured"
TIMED_HEADERS: Final = ("", "direct", "through the proxy")
STORED_HEADERS: Final = (
    "partitions",
    "client fill",
    "raw + producer zstd",
    "frames",
    "through the proxy",
    "records/batch stored",
    "proxy / smaller",
)


def cpu_us_per_record(part: Document) -> list[float]:
    """The proxy's CPU µs per record in each measured round of a `bench proxy` part."""
    return [cpu / n * 1e6 for cpu, n in zip(part["proxy_cpu_s"], part["records"], strict=True) if n]


def records_per_cpu_s(part: Document) -> list[float]:
    """Records per proxy CPU second in each measured round of a `bench proxy` part."""
    return [n / cpu for cpu, n in zip(part["proxy_cpu_s"], part["records"], strict=True) if cpu]


def broker_us_per_record(part: Document) -> list[float] | None:
    """The broker's CPU µs per record in each measured round of a `bench proxy` part; None when
    the document holds none (no broker pid, or written before the bench read it)."""
    broker = part.get("broker_cpu_s")
    if not broker:
        return None
    return [cpu / n * 1e6 for cpu, n in zip(broker, part["records"], strict=True) if n]


def proxy_over_broker(proxy: Document, direct: Document) -> list[float] | None:
    """Per measured round, the proxy's CPU seconds over the broker's when the same client wrote
    directly (the same records, the same round); None without the broker's CPU."""
    broker = direct.get("broker_cpu_s")
    if not broker:
        return None
    return [p / b for p, b in zip(proxy["proxy_cpu_s"], broker, strict=True) if b]


def records_per_request(part: Document) -> list[float] | None:
    """Records per Produce request the proxy forwarded in each measured round of a `bench proxy`
    part; None when the document holds no request counts (written before the bench read them)."""
    requests = part.get("produce_requests")
    if requests is None:
        return None
    return [n / r for n, r in zip(part["records"], requests, strict=True) if r]


def added_ms(proxy: Sequence[float], direct: Sequence[float]) -> list[float]:
    """Per round, what the proxy added to a latency percentile (ms)."""
    return [p - d for p, d in zip(proxy, direct, strict=True)]


def stored_per_record(entry: Document, path: str) -> list[float]:
    """Bytes stored per record by `path` in each measured round of a `bench proxy` bytes entry."""
    pairs = zip(entry["stored_bytes"][path], entry["records"][path], strict=True)
    return [b / r for b, r in pairs if r]


def stored_fill(entry: Document, path: str) -> list[float]:
    """Records per stored batch of `path` in each measured round of a bytes entry."""
    pairs = zip(entry["records"][path], entry["batches"][path], strict=True)
    return [r / b for r, b in pairs if b]


def stored_ratio(entry: Document) -> list[float]:
    """Per measured round, the proxy's bytes per record over the smaller of raw + producer zstd
    (direct) and per-record frames."""
    return [
        p / min(d, f)
        for p, d, f in zip(
            stored_per_record(entry, "proxy"),
            stored_per_record(entry, "direct"),
            stored_per_record(entry, "frames"),
            strict=True,
        )
    ]


@dataclass(frozen=True, slots=True)
class ProxyTables:
    """The rows of `bench proxy`'s two tables (`TIMED_HEADERS`, `STORED_HEADERS`); `stored` is
    empty when the bytes were not measured (no --data-dir)."""

    timed: list[list[object]]
    stored: list[list[object]]


def proxy_tables(doc: Document) -> ProxyTables:
    """Both tables of a `bench proxy` document (`{"settings", "results"}`)."""
    settings, results = doc["settings"], doc["results"]
    parts = results["parts"]
    latency_d, latency_p = parts["latency, direct"], parts["latency, proxy"]
    rate = f"{settings['rate']:,} records/s"

    def both(part: str, key: str, fmt: str = MS) -> list[object]:
        return [spread(parts[f"{part}, {path}"][key], fmt) for path in ("direct", "proxy")]

    if "java, proxy" in parts:
        java_d, java_p = parts["java, direct"], parts["java, proxy"]
        java = settings["java"]
        java_rows: list[list[object]] = [
            [f"at {rate}, Java producer-perf-test (issue 26's client, no compression)", "", ""],
            [
                f"records/s, the {java['records'] - java['warmup_records']:,} after "
                f"{java['warmup_records']:,} warm-up records",
                *both("java", "records_per_s", "{:,.0f}"),
            ],
            ["p50 ms, send() → callback (Java: whole ms)", *both("java", "p50_ms", JAVA_MS)],
            ["p99 ms, same", *both("java", "p99_ms", JAVA_MS)],
            _added("p50 added by the proxy, ms (target ≤ +1)", java_p, java_d, "p50_ms", "{:+g}"),
            _added("p99 added by the proxy, ms (target ≤ +5)", java_p, java_d, "p99_ms", "{:+g}"),
            _per_request("Java", java_p),
            [
                "proxy CPU µs per record, warm-up records included (target ≤ 10)",
                "",
                spread(cpu_us_per_record(java_p), MS),
            ],
            [
                "the broker's CPU µs per record meanwhile (the same run's reference)",
                *(_or_not_measured(broker_us_per_record(p), MS) for p in (java_d, java_p)),
            ],
            [
                "proxy CPU ÷ the broker's CPU written directly, per round",
                "",
                _or_not_measured(proxy_over_broker(java_p, java_d), "{:.2f}"),
            ],
            *(
                row
                for variant in settings.get("variants", [])
                for row in _variant_rows(variant, parts[VARIANT_PREFIX + variant], java_p)
            ),
        ]
    else:
        java_rows = [
            [
                f"at {rate}, Java producer-perf-test: not in this JSON (written before "
                "`bench proxy` had that part)",
                "–",
                "–",
            ]
        ]

    timed: list[list[object]] = [
        [
            f"produce, unthrottled: records/s ({settings['count']:,} events, "
            f"{settings['partitions']} partitions)",
            *both("produce", "records_per_s", "{:,.0f}"),
        ],
        _per_request("unthrottled", parts["produce, proxy"]),
        ["proxy CPU µs per record", "", spread(cpu_us_per_record(parts["produce, proxy"]), MS)],
        [
            "records per proxy CPU second (target ≥ 100,000)",
            "",
            spread(records_per_cpu_s(parts["produce, proxy"])),
        ],
        *java_rows,
        [
            f"at {rate}, librdkafka client (producer zstd; no target: not the issue's client)",
            "",
            "",
        ],
        ["p50 ms, produce() → delivery report", *both("latency", "p50_ms")],
        ["p99 ms, same", *both("latency", "p99_ms")],
        _added("p50 added by the proxy, ms", latency_p, latency_d, "p50_ms", "{:+.1f}"),
        _added("p99 added by the proxy, ms", latency_p, latency_d, "p99_ms", "{:+.1f}"),
        _per_request("librdkafka", latency_p),
        ["proxy CPU µs per record, librdkafka", "", spread(cpu_us_per_record(latency_p), MS)],
        [
            f"fetch: records/s reading {settings['count']:,} stored records (direct: as stored; "
            "through the proxy: decoded)",
            *both("fetch", "records_per_s", "{:,.0f}"),
        ],
        [
            "records decoded per proxy CPU second (target ≥ 150,000)",
            "",
            spread(records_per_cpu_s(parts["fetch, proxy"])),
        ],
    ]
    stored: list[list[object]] = [
        [
            entry["partitions"],
            entry["fill"],
            spread(stored_per_record(entry, "direct"), MS),
            spread(stored_per_record(entry, "frames"), MS),
            spread(stored_per_record(entry, "proxy"), MS),
            spread(stored_fill(entry, "proxy"), MS),
            spread(stored_ratio(entry), "{:.3f}"),
        ]
        for entry in results["stored"]
    ]
    return ProxyTables(timed, stored)


# -- FIGURES.md ----------------------------------------------------------------------------------


def proxy_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [
        *flag("--kind", settings["kind"]),
        *flag("-n", settings["count"]),
        *flag("--seconds", settings["seconds"]),
        *flag("--partitions", settings["partitions"]),
        *flag("--runs", settings["runs"]),
        *flag("--fills", ",".join(map(str, settings["fills"]))),
        *flag("--batches", settings["batches"]),
        *flag("--data-dir", settings["data_dir"]),
        *(f for v in settings.get("variants", []) for f in flag("--variant", v)),
    ]


def proxy_markdown(doc: Document) -> list[str]:
    """FIGURES.md's `bench proxy` tables, each under the sentence that reads it."""
    tables = proxy_tables(doc)
    out = [
        "Direct and through the proxy, median [min–max] of the measured rounds:",
        "",
        *table(TIMED_HEADERS, tables.timed),
    ]
    if not tables.stored:
        return [*out, "", "Bytes stored: not measured (no --data-dir)."]
    return [
        *out,
        "",
        "Bytes stored per record in the broker's log segments at each client fill "
        "(`batch.num.messages`); frames: the proxy with `ZDICT_CODEC__OUTPUT_MODE=frames`; "
        "proxy / smaller: target ≤ 1.03:",
        "",
        *table(STORED_HEADERS, tables.stored),
    ]


def _variant_rows(variant: str, part: Document, proxy: Document) -> list[list[object]]:
    """A variant's rows (`bench proxy --variant`): its CPU per record in the Java part, and over
    the measured proxy's in the same round."""
    ours = cpu_us_per_record(part)
    ratios = [v / p for v, p in zip(ours, cpu_us_per_record(proxy), strict=True) if p]
    return [
        [f"proxy CPU µs per record with {variant}, in the same rounds", "", spread(ours, MS)],
        [f"with {variant} ÷ the proxy's, per round", "", spread(ratios, "{:.2f}")],
    ]


def _added(
    label: str, proxy: dict[str, Any], direct: dict[str, Any], key: str, form: str
) -> list[object]:
    """A row of the latency `key` the proxy added over going direct, per round."""
    return [label, "", spread(added_ms(proxy[key], direct[key]), form)]


def _per_request(client: str, part: Document) -> list[object]:
    """The row of records per Produce request through the proxy in `part` (`client`'s)."""
    cell = _or_not_measured(records_per_request(part), PER_REQUEST)
    return [PER_REQUEST_ROW.format(client=client), "", cell]


def _or_not_measured(values: Sequence[float] | None, form: str) -> str:
    """`values` as a cell (`spread`), or `NOT_MEASURED` for a figure the document lacks."""
    return NOT_MEASURED if values is None else spread(values, form)
