"""`bench savings`' tables from its JSON: printed by the bench and rendered on FIGURES.md
(`sidecar.bench.figures`). Per corpus and fill, the bytes stored through the proxy, the relay
and the in-process producer (one cell, `proxy · relay · producer`) over the fewer of frames'
and producer zstd's, then over producer zstd's alone; the worst against the target."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.bench.figure_tables import Document, flag, repeated, table

#: How each path's figures were made, where the name does not say it.
_THROUGH = {
    "relay_": "the relay, its producer batching the fill",
    "producer_": "the in-process producer (a `ZdictProducer` batching the fill, after 256 of "
    "the stream's other values)",
}


def savings_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [
        *repeated("--corpus", settings["corpora"]),
        *flag("--limit", settings["limit"]),
        *flag("--fills", settings["fills"]),
        *flag("--data-dir", settings["data_dir"]),
    ]


def savings_tables(doc: Document) -> list[str]:
    """Per corpus and fill, the product's stored bytes through the proxy, the relay and the
    in-process producer (one cell, `proxy · relay · producer`) over the fewer of frames' and
    producer zstd's, then over producer zstd's alone; the worst against the target."""
    settings, rows = doc["settings"], doc["results"]
    fills: list[int] = settings["fills"]
    target: float = settings["target"]
    paths = [
        (name, prefix)
        for name, prefix in (
            ("the proxy", ""),
            ("the relay", "relay_"),
            ("the in-process producer", "producer_"),
        )
        if any(f"{prefix}versus_better" in f for r in rows for f in r["fills"])
    ]

    def value(corpus: Document, fill: int, key: str) -> str:
        found = [f for f in corpus["fills"] if f["fill"] == fill and key in f]
        text = f"{found[0][key]:.3f}" if found else "–"
        return "1" if text == "1.000" else text

    def cell(corpus: Document, fill: int, key: str) -> str:
        values = [value(corpus, fill, prefix + key) for _, prefix in paths]
        return values[0] if len(set(values)) == 1 else " · ".join(values)

    def body(key: str) -> list[list[object]]:
        return [
            [
                f"{r['corpus']} ({r['mean_bytes']:,.0f} B, {r['sample']:,})",
                *(cell(r, f, key) for f in fills),
            ]
            for r in rows
        ]

    headers = ["corpus (mean B, trained on)", *(f"fill {f}" for f in fills)]
    through = " · ".join(_THROUGH.get(prefix, name) for name, prefix in paths)
    if len(paths) > 1:
        through += " (one figure where they are the same)"
    out = [
        "Stored bytes (log segments) at each fill (records per batch, "
        f"{settings['batches']} batches, {settings.get('min_records', 0):,} records at least; "
        f"trained on the first {settings['sample']:,} values, measured on the rest; –: too few "
        f"values), output mode auto, through {through}; 1: 1.000.",
    ]
    for name, prefix in paths:
        better = [
            f[f"{prefix}versus_better"]
            for r in rows
            for f in r["fills"]
            if f"{prefix}versus_better" in f
        ]
        met = sum(b <= target for b in better)
        out.append(
            f"- through {name}: at most {target:.2f}× the better at {met} of {len(better)} "
            f"fills; the worst {max(better):.3f}×"
        )
    return [
        *out,
        "",
        "Over the fewer of per-record frames (a frames proxy) and the producer's zstd alone:",
        "",
        *table(headers, body("versus_better")),
        "",
        "Over the producer's zstd alone (below 1: saved):",
        "",
        *table(headers, body("versus_producer")),
        *_level_tables(rows, fills),
    ]


def _level_tables(rows: Sequence[Document], fills: Sequence[int]) -> list[str]:
    """Per corpus and level, at each fill from 16: the bytes over level 3's and the extra CPU
    per record (measured); then the chosen level through the relay at the largest fill."""
    measured = [
        f
        for f in fills
        if any(str(3) in g.get("levels", {}) for r in rows for g in r["fills"] if g["fill"] == f)
    ]
    if not measured:
        return []

    def cell(corpus: Document, fill: int, level: str) -> str:
        found = next((g for g in corpus["fills"] if g["fill"] == fill), None)
        if found is None or level not in found.get("levels", {}):
            return "–"
        at, base = found["levels"][level], found["levels"]["3"]
        extra = (at["cpu_ns_per_record"] - base["cpu_ns_per_record"]) / 1000
        return f"{at['stored_bytes'] / base['stored_bytes']:.3f} {extra:+.1f}"

    levels = sorted({lv for r in rows for g in r["fills"] for lv in g.get("levels", {})}, key=int)
    body = [
        [
            r["corpus"],
            r["mean_bytes"],
            r.get("batch_level") or 3,
            level,
            *(cell(r, f, level) for f in measured),
        ]
        for r in rows
        for level in levels
        if level != "3"
    ]
    full = measured[-1]
    relay = [
        [
            r["corpus"],
            r.get("batch_level") or 3,
            cell(r, full, str(r.get("batch_level") or 3)),
            next(
                (
                    f"{g['relay_versus_producer']:.3f}"
                    for g in r["fills"]
                    if g["fill"] == full and "relay_versus_producer" in g
                ),
                "–",
            ),
        ]
        for r in rows
    ]
    proxy = [
        [r["corpus"], r["mean_bytes"], level, *(_recompress(r, f, level) for f in measured)]
        for r in rows
        for level in ("6", "9")
    ]
    return [
        "",
        "The batch codec's level, same values (offline, librdkafka's zstd, whole batches of each "
        "fill): bytes over level 3's and the extra CPU µs per record over level 3's (measured, "
        "one core); chosen: the level training picked (training.batch_level_budget_us; "
        "librdkafka accepts 12 at most):",
        "",
        *table(["corpus", "mean B", "chosen", "level", *(f"fill {f}" for f in measured)], body),
        "",
        f"At fill {full}, the chosen level offline (bytes over level 3's, extra µs per record) "
        "and through the relay (its producer at that level; bytes over producer zstd at level 3, "
        "log segments):",
        "",
        *table(["corpus", "chosen", f"offline, fill {full}", f"relay, fill {full}"], relay),
        "",
        "A proxy recompressing a client's level-3 batch at level 6 or 9 (decompress, compress; "
        "measured): bytes over the client's batch, and CPU µs per record (the proxy's target: "
        "10 µs per record in all):",
        "",
        *table(["corpus", "mean B", "level", *(f"fill {f}" for f in measured)], proxy),
    ]


def _recompress(corpus: Document, fill: int, level: str) -> str:
    """Bytes of `level`'s batches over level 3's at `fill`, and the µs per record a proxy
    takes to recompress a level-3 batch at `level`."""
    found = next((g for g in corpus["fills"] if g["fill"] == fill), None)
    if found is None or level not in found.get("levels", {}):
        return "–"
    at, base = found["levels"][level], found["levels"]["3"]
    ratio = at["stored_bytes"] / base["stored_bytes"]
    return f"{ratio:.3f} {at['recompress_ns_per_record'] / 1000:.1f}"
