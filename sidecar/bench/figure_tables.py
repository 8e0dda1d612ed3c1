"""Each benchmark's JSON as Markdown: the flags of the command that wrote it, and its tables.

One pair of functions per benchmark, `NAME_flags(doc)` and `NAME_tables(doc)`, over the JSON
document `zdict-sidecar bench NAME --json-out FILE` writes (`{"benchmark", "environment",
"settings", "results"}`; the shapes are the benchmarks' own `to_dict`s). Figures are formatted as
the benchmarks print them: medians with [min–max] of the measured rounds, the same decimals.
`sidecar.bench.figures` puts them on the page. The proxy's, the registry's and the savings'
tables, which their benchmarks print too, are modules of their own (`proxy_tables`,
`registry_tables`, `savings_tables`) built on the helpers here.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from sidecar.record_batch import crossover

#: A benchmark's JSON document, as `json.load` returns it.
Document = Mapping[str, Any]

#: Names `bench relay` gives two of its rows (sidecar/bench/relay.py, which loads the Kafka
#: client on import): the rows the others are compared with.
PASS_THROUGH: Final = "pass-through, 1 worker"
C_RELAY: Final = "C relay (kcat -C | kcat -P)"
#: Ids whose header cost `bench wire` measures (sidecar/bench/wire.py's SAMPLE_IDS): the first
#: dictionary, the 128th, the 16,384th.
WIRE_IDS: Final = (32768, 32895, 49151)


# -- Markdown ------------------------------------------------------------------------------------


def spread(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    """`median [min–max]` of `values` (the median alone for one value, `–` for none)."""
    if not values:
        return "–"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


#: How a cell holding a figure starts (a bold one included): such columns are right-aligned.
_FIGURE: Final = re.compile(r"^(\*\*)?[-+–~0-9]")


def table(headers: str | Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table; `headers` as a list or as one string of ` | `-separated names. A column
    of figures (every cell after the first column a number, or empty) is right-aligned."""
    names = headers.split(" | ") if isinstance(headers, str) else list(headers)
    cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]

    def align(i: int) -> str:
        figures = i > 0 and all(_FIGURE.match(row[i]) or not row[i] for row in cells)
        return "---:" if figures else "---"

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(values) + " |"

    return [line(names), line([align(i) for i in range(len(names))]), *map(line, cells)]


def _ratio(part: float, whole: float | None) -> str:
    return f"{part / whole:.2f}" if whole else "–"


def _speed(speed: Mapping[str, float]) -> str:
    """A `Speed` of `bench codec` (median, low, high messages/s), as it prints one."""
    return spread([speed["low"], speed["median"], speed["high"]])


def _crossover(fills: Sequence[int], ours: Sequence[float], theirs: Sequence[float]) -> str:
    at = crossover(fills, ours, theirs)
    if at is None:
        return f"not within {fills[-1]} records per batch"
    return f"stores fewer bytes than the sidecar's records from ~{at:.1f} records per batch"


def flag(name: str, value: object) -> list[str]:
    """`name value` as a command line has it: nothing for None, False or an empty list, the
    name alone for True, and a list's items comma-separated."""
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value) or None
    if value is None or value is False:
        return []
    if value is True:
        return [name]
    text = str(value)
    return [name, text if text and " " not in text else f"'{text}'"]


def repeated(name: str, values: Sequence[object] | None) -> list[str]:
    """A repeatable flag, once per value."""
    return [part for value in values or () for part in flag(name, value)]


# -- bench codec ---------------------------------------------------------------------------------


def codec_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [
        *repeated("--kind", [r["label"] for r in doc["results"]]),
        *flag("-n", settings["count"]),
        *flag("--seed", settings["seed"]),
        *flag("--runs", settings["runs"]),
    ]


def codec_tables(doc: Document) -> list[str]:
    results: Sequence[Document] = doc["results"]
    paths = list(dict.fromkeys(path for r in results for path in r["speeds"]))
    rows = [[f"`{path}`", *(c for r in results for c in _path_cells(r, path))] for path in paths]
    for key, label, ratio in (
        ("compress_msg_per_s", "`zstd -b` (native CLI)", "1.00"),
        ("decompress_msg_per_s", "`zstd -d` (native decompress)", "–"),
    ):
        rows.append([label, *(c for r in results for c in (f"{r['native'][key]:,.0f}", ratio))])
    lines = [
        "Messages/s, one thread, median [min–max] of the measured runs:",
        "",
        *table(["path", *(h for r in results for h in (f"{r['label']} msg/s", "× native"))], rows),
        "",
        "Held-out ratio (trained on the first 20 %), header bytes counted:",
        "",
        *table(
            "messages | held-out | mean B | dictionary | level | ratio | frames only | "
            "no dictionary",
            [
                [
                    r["label"],
                    f"{r['messages']:,}",
                    f"{r['mean_size']:.1f}",
                    f"{r['dict_bytes'] // 1024} KiB",
                    r["level"],
                    *(f"{r[k]:.3f}" for k in ("ratio_with_header", "ratio_frames_only")),
                    f"{r['nodict_ratio']:.3f}",
                ]
                for r in results
            ],
        ),
    ]
    for r in results:
        lines += ["", *_codec_batches(r)]
    return lines


def _path_cells(result: Document, path: str) -> list[str]:
    speed = result["speeds"].get(path)
    if speed is None:
        return ["–", "–"]
    return [_speed(speed), _ratio(speed["median"], result["native"]["compress_msg_per_s"])]


def _codec_batches(result: Document) -> list[str]:
    batches: Sequence[Document] = result["batches"]
    if not batches:
        return []
    variants, codecs = list(batches[0]["bytes_per_message"]), list(batches[0]["speeds"])
    rows = [
        [
            row["fill"],
            *(_times(row["bytes_per_message"], "raw none", v) for v in variants),
            *(_speed(row["speeds"][c]) for c in codecs),
        ]
        for row in batches
    ]
    fills = [row["fill"] for row in batches]
    ours = [row["bytes_per_message"]["sidecar none"] for row in batches]
    lines = [
        f"`{result['label']}` in Kafka record batches (v2 format, exact; keys null, headers "
        "counted), bytes per message, (×) = raw none / variant; msg/s: each producer codec "
        "compressing the raw batches:",
        "",
        *table(["records per batch", *variants, *(f"{c} msg/s" for c in codecs)], rows),
        "",
    ]
    for codec in codecs:
        theirs = [row["bytes_per_message"][f"raw {codec}"] for row in batches]
        lines.append(f"- crossover, producer {codec}: {_crossover(fills, ours, theirs)}")
    oracle = ", ".join(f"level {level}: {b:.1f} B" for level, b in result["oracle"].items())
    ratio = result["encode_vs_batch_api"]
    lines.append(f"- the whole held-out stream as one zstd frame (the oracle), a message: {oracle}")
    lines.append(f"- `encode_batch` / `multi_compress_to_buffer` speed: {ratio:.2f}")
    return lines


def _times(sizes: Mapping[str, float], base: str, variant: str) -> str:
    return f"{sizes[variant]:.1f} ({sizes[base] / sizes[variant]:.2f}×)"


# -- bench storage -------------------------------------------------------------------------------


def storage_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [
        *flag("--kind", settings["kind"]),
        *flag("-n", settings["count"]),
        *flag("--partitions", settings["partitions"]),
        *flag("--runs", settings["runs"]),
        *flag("--fills", settings["fills (batch.num.messages)"]),
        *flag("--data-dir", settings["data_dir"]),
    ]


def storage_tables(doc: Document) -> list[str]:
    results = doc["results"]
    raw_bytes, messages = results["raw_value_bytes"], results["messages"]
    found = {(v["source"], v["codec"], v["fill_setting"]): v for v in results["variants"]}
    codecs = list(dict.fromkeys(v["codec"] for v in results["variants"]))
    fills = sorted({f for _, _, f in found if f is not None})

    def cells(variants: Sequence[Document]) -> list[str]:
        fewest = min(v["bytes_per_message"] for v in variants)
        return [
            f"**{text}**" if v["bytes_per_message"] == fewest else text
            for v in variants
            for text in [f"{v['bytes_per_message']:.1f} ({raw_bytes / v['stored_bytes']:.2f}×)"]
        ]

    rows: list[list[object]] = []
    for fill in fills:
        raw = [found["raw", codec, fill] for codec in codecs]
        ours = [found["sidecar", codec, fill] for codec in codecs]
        rows.append([fill, *cells([*raw, *ours]), f"{_cpus(raw)} · {_cpus(ours)}"])
    own = [found[key] for key in (("sidecar", codec, None) for codec in codecs) if key in found]
    if own:
        fill_text = " / ".join(f"{v['achieved_fill']:.0f}" for v in own)
        rows.append(
            [
                f"the sidecar's own producer, full speed ({fill_text} per batch)",
                *([""] * len(codecs)),
                *(
                    f"{v['bytes_per_message']:.1f} ({raw_bytes / v['stored_bytes']:.2f}×)"
                    for v in own
                ),
                f"· {_cpus(own)}",
            ]
        )
    headers = [
        "records per batch",
        *(f"{source}, {codec}" for source in ("raw", "sidecar") for codec in codecs),
        "broker CPU s / M (raw · sidecar)",
    ]
    return [
        f"{messages:,} `{results['kind']}` events ({raw_bytes / messages:.1f} B mean) as the "
        "broker's log segments store them, batch headers and record framing included; bytes per "
        "message, (×) = raw value bytes / stored bytes; bold: the fewest at that fill:",
        "",
        *table(headers, rows),
        "",
        *_storage_notes(found, fills, codecs),
    ]


def _cpus(variants: Sequence[Document]) -> str:
    """The broker's CPU seconds per million messages while it took each variant, median of the
    runs (`–`: not measured), `/`-separated."""
    return "/".join(
        f"{statistics.median(v['broker_cpu_seconds']) / (v['messages'] / 1e6):.0f}"
        if v["broker_cpu_seconds"]
        else "–"
        for v in variants
    )


def _storage_notes(
    found: Mapping[tuple[str, str, int | None], Document],
    fills: Sequence[int],
    codecs: Sequence[str],
) -> list[str]:
    exact = all(
        found[source, "none", fill]["predicted_bytes"]
        == found[source, "none", fill]["stored_bytes"]
        for source in ("raw", "sidecar")
        for fill in fills
    )
    lines = [
        "- compression none equals, byte for byte, what `sidecar/record_batch.py` computes from "
        f"Kafka's record format at every fill: {'yes' if exact else 'NO'}"
    ]
    ours = [found["sidecar", "none", fill]["bytes_per_message"] for fill in fills]
    own = found.get(("sidecar", "none", None))
    for codec in codecs[1:]:
        theirs = [found["raw", codec, fill]["bytes_per_message"] for fill in fills]
        lines.append(f"- crossover, producer {codec}: {_crossover(fills, ours, theirs)}")
        if own is not None:
            flat = [own["bytes_per_message"]] * len(fills)
            lines.append(
                f"- crossover, producer {codec}, against the sidecar's output as its own producer "
                f"writes it: {_crossover(fills, flat, theirs)}"
            )
    return lines


# -- bench relay ---------------------------------------------------------------------------------


def relay_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    rates = ",".join("max" if r is None else f"{r:g}" for r in settings["latency_rate"])
    return [
        *repeated("--kind", settings["kind"]),
        *flag("-n", settings["count"]),
        *flag("--partitions", settings["partitions"]),
        *flag("--runs", settings["runs"]),
        *flag("--latency-rate", rates or "''"),
        *flag("--latency-seconds", settings["latency_seconds"]),
        *flag("--all-kinds", settings["all_kinds"]),
        *flag("--baseline", settings["baseline"]),
    ]


def _rate(run: Document) -> float:
    """Messages/s of a `RelayRun`, from its first output record to its last."""
    return float(run["messages"] / run["seconds"]) if run["seconds"] else 0.0


def _cpu_us(run: Document) -> float:
    """Steady-state CPU µs per record of a `RelayRun` (0.0 when not measured)."""
    if not run["steady_messages"]:
        return 0.0
    return float(run["steady_cpu_seconds"] / run["steady_messages"] * 1e6)


def relay_tables(doc: Document) -> list[str]:
    lines: list[str] = []
    for kind in doc["results"]:
        lines += ["", *_saturation(kind)]
        if kind["latency"]:
            lines += ["", *_latency(kind)]
    return lines[1:]


def _saturation(kind: Document) -> list[str]:
    runs: Mapping[str, Sequence[Document]] = kind["saturation"]

    def median(name: str, measure: Callable[[Document], float]) -> float | None:
        return statistics.median(map(measure, runs[name])) if runs.get(name) else None

    rate_base, cpu_base = median(PASS_THROUGH, _rate), median(C_RELAY, _cpu_us)
    rows = [
        [
            name,
            spread([_rate(r) for r in measured]),
            _ratio(statistics.median(map(_rate, measured)), rate_base),
            spread([_cpu_us(r) for r in measured], "{:.2f}"),
            _ratio(statistics.median(map(_cpu_us, measured)), cpu_base),
            round(max(r["peak_rss_bytes"] for r in measured) / 2**20),
            sum(r["training_runs"] for r in measured),
        ]
        for name, measured in runs.items()
    ]
    return [
        f"{kind['count']:,} pre-loaded `{kind['kind']}` events ({kind['mean_bytes']:.0f} B), "
        f"{kind['partitions']} partitions; msg/s from the first output record to the last; CPU "
        "µs per record of the relay's processes over the same span:",
        "",
        *table(
            "variant | msg/s | × pass-through | CPU µs / record | × C relay | peak RSS MiB | "
            "training runs",
            rows,
        ),
    ]


def _latency(kind: Document) -> list[str]:
    rows = [
        [
            key,
            spread([r["achieved_rate"] for r in runs]),
            *(spread([r[k] for r in runs], "{:.1f}") for k in ("p50_ms", "p99_ms")),
            spread([r["max_ms"] for r in runs], "{:.0f}"),
        ]
        for key, runs in kind["latency"].items()
    ]
    return [
        f"End to end, `{kind['kind']}` (producer timestamp → output consumer, after a warm-up; "
        "max: as fast as one producer can, latency is then the queue):",
        "",
        *table("variant @ offered load | msg/s through | p50 ms | p99 ms | max ms", rows),
    ]


# -- bench producer ------------------------------------------------------------------------------


def producer_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [
        *flag("-n", settings["count"]),
        *flag("--runs", settings["runs"]),
        *flag("--fills", settings["fills"]),
    ]


#: `bench producer`'s timings per record size, in the order of its table.
_PRODUCER_TIMINGS: Final = (
    "plain_us",
    "zdict_us",
    "added_us",
    "added_cpu_us",
    "header_added_us",
    "encode_us",
    "zstd_us",
)


def producer_tables(doc: Document) -> list[str]:
    sizes: Sequence[Document] = doc["results"]
    timings = [
        [
            f"{s['label']} (`{s['kind']}`, {s['mean_bytes']:.0f} B)",
            *(spread(s[key], "{:.2f}") for key in _PRODUCER_TIMINGS),
        ]
        for s in sizes
    ]
    fills = list(sizes[0]["stored"]) if sizes else []
    stored = [
        [fill, *(c for s in sizes for c in _stored_cells(s["stored"][fill]))] for fill in fills
    ]
    columns = ("raw", "raw + zstd", "in-process", "in-process + zstd")
    return [
        "µs per `produce()` call, median [min–max] of the measured rounds (added: `ZdictProducer` "
        "− `Producer` in the same round; header: what a `zd` header alone adds; encoding: what "
        "the producer metrics time; zstd alone: the encoder's compress of each value, the floor "
        "under the encoding):",
        "",
        *table(
            "records | `Producer` | `ZdictProducer` | added | added, calling thread's CPU | "
            "header | encoding | zstd alone",
            timings,
        ),
        "",
        "Bytes a record as the broker stores it (batch header and record framing counted, keys "
        "null), (×) = raw + zstd / in-process + zstd:",
        "",
        *table(
            ["records per batch", *(f"{s['label']}: {c}" for s in sizes for c in columns)], stored
        ),
    ]


def _stored_cells(stored: Mapping[str, float]) -> list[str]:
    return [
        *(f"{stored[key]:.1f}" for key in ("raw none", "raw zstd", "zdict none")),
        f"{stored['zdict zstd']:.1f} ({stored['raw zstd'] / stored['zdict zstd']:.2f}×)",
    ]


# -- bench lifecycle -----------------------------------------------------------------------------


def lifecycle_flags(doc: Document) -> list[str]:
    settings, results = doc["settings"], doc["results"]
    return [
        *flag("--runs", len(results["drift"])),
        *flag("--rate", settings["drift"]["rate"]),
        *flag("--seconds", settings["drift"]["seconds"]),
        *flag("--drift-after", settings["drift"]["drift_after"]),
        *flag("--cost-rounds", len(results["cost"])),
        *flag("--cost-messages", settings["cost"]["messages"]),
    ]


def lifecycle_tables(doc: Document) -> list[str]:
    drift, cost_settings = doc["settings"]["drift"], doc["settings"]["cost"]
    runs: Sequence[Document] = doc["results"]["drift"]
    cost: Sequence[Document] = doc["results"]["cost"]
    trainings = [t for run in runs for t in run["trainings"]]
    recoveries = [r["recovered"] - r["drift_at"] for r in runs if r["recovered"] is not None]
    wall = spread([float(t["seconds"]) for t in trainings], "{:.1f}")
    cpu = spread([float(t["cpu_seconds"]) for t in trainings if t.get("cpu_seconds")], "{:.1f}")
    return [
        f"Drift: {drift['rate']:,} `product_viewed` events/s for {drift['seconds']:.0f} s through "
        f"a fresh sidecar, the schema changed after {drift['drift_after']:.0f} s; +s: seconds "
        "after the change:",
        "",
        *table(
            "run | first dictionary active | drift detected | retrained dictionary active | "
            "ratio back to its level before | ratio held-out / before / lowest / end | "
            "decoded from the registry alone",
            [_drift_row(i, run) for i, run in enumerate(runs, 1)],
        ),
        "",
        f"- from the change to the ratio back: {spread(recoveries, '{:.1f}')} s",
        f"- training runs beside the relay: {len(trainings)}, {wall} s wall, {cpu} CPU seconds",
        "",
        f"The cost: {cost_settings['messages']:,} pre-loaded events relayed by one worker while "
        "the trainer retrains every 5 s; median [min–max] of the rounds:",
        "",
        *table(
            " | median [min–max]",
            [
                [
                    "msg/s while a training run is under way",
                    spread([r["active_rate"] for r in cost]),
                ],
                ["msg/s while none is", spread([r["idle_rate"] for r in cost])],
                [
                    "ratio active / idle, within each run",
                    spread([r["ratio"] for r in cost], "{:.2f}"),
                ],
                [
                    "training process's share of the sidecar's CPU",
                    spread([100 * r["cpu_share"] for r in cost], "{:.1f}%"),
                ],
                [
                    "training run, wall seconds",
                    spread([s for r in cost for s in r["training_seconds"]], "{:.1f}"),
                ],
            ],
        ),
    ]


def _drift_row(i: int, run: Document) -> list[object]:
    def since(t: float | None) -> str:
        return "–" if t is None else f"+{t - run['drift_at']:.1f} s"

    ratios = (run["heldout_ratio"], run["pre_ratio"], run["dip_ratio"], run["post_ratio"])
    first = run["first_dictionary"]
    return [
        i,
        "–" if first is None else f"{first:.1f} s",
        since(run["detected"]),
        since(run["switched"]),
        since(run["recovered"]),
        " / ".join("–" if r is None else f"{r:.2f}" for r in ratios),
        f"{run['decoded']:,} / {run['produced']:,}",
    ]


# -- bench choice, bench wire --------------------------------------------------------------------


def choice_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [*repeated("--corpus", settings["corpora"]), *flag("--limit", settings["limit"])]


def choice_tables(doc: Document) -> list[str]:
    rows: Sequence[Document] = doc["results"]
    versus = [r["versus_naive"] for r in rows]
    body = [
        [
            r["corpus"],
            f"{r['messages']:,}",
            r["mean_bytes"],
            *(f"{r[k]:.3f}" for k in ("ours_ratio", "naive_ratio", "versus_naive")),
            f"{r['dict_size'] // 1024} KiB, {r['level']}" if r["dict_size"] else "–",
            r["naive_pick"],
        ]
        for r in rows
    ]
    lines = [
        "Held-out ratio, bytes as a record costs them (value + header), trained on the first "
        "20 %; naive: python-zstandard's defaults, the best of 16/64/112 KiB × levels 1 and 3 "
        "picked on the held-out part itself:",
        "",
        *table(
            "corpus | messages | mean B | ours | naive | ours / naive | ours: dict, level | "
            "naive pick",
            body,
        ),
    ]
    if versus:
        lines += [
            "",
            f"Ours / naive: median {statistics.median(versus):.3f}, min {min(versus):.3f}, max "
            f"{max(versus):.3f} over {len(rows)} corpora.",
        ]
    return lines


def wire_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [
        *flag("-n", settings["count"]),
        *repeated("--kind", settings["kinds"]),
        *repeated("--corpus", settings["corpora"]),
        *flag("--pairs", settings["pairs"]),
    ]


def wire_tables(doc: Document) -> list[str]:
    results = doc["results"]
    frames: Mapping[str, Sequence[Sequence[Any]]] = results["frames"]
    forms = list(dict.fromkeys(row[1] for rows in frames.values() for row in rows))
    by_form = {name: {row[1]: row[2] for row in rows} for name, rows in frames.items()}
    wrong = results["wrong_dictionary"]
    outcomes = sorted(wrong["outcomes"].items(), key=lambda kv: -kv[1])
    return [
        "Bytes our header adds to a record as Kafka stores it (key, value, their lengths):",
        "",
        *table(
            ["header", "key", *(f"id {i}" for i in WIRE_IDS), "note"],
            [[h["name"], f"`{h['key']}`", *h["costs"], h["note"]] for h in results["headers"]],
        ),
        "",
        "Frame bytes per held-out message (16 KiB dictionary, level 3), each form one field less:",
        "",
        *table(
            ["messages", *forms],
            [
                [name, *(f"{sizes[f]:.2f}" if f in sizes else "–" for f in forms)]
                for name, sizes in by_form.items()
            ],
        ),
        "",
        f"Compact frames decoded with another dictionary of the same namespace "
        f"({wrong['pairs']:,} pairs):",
        "",
        *table(
            "outcome | pairs | share",
            [[k, f"{v:,}", f"{v / max(1, wrong['pairs']):.2%}"] for k, v in outcomes],
        ),
    ]
