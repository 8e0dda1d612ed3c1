"""`bench savings`' tables from its JSON: printed by the bench and rendered on FIGURES.md
(`sidecar.bench.figures`). Per corpus and fill, the bytes stored through the proxy and through
the relay (one cell, `proxy · relay`) over the fewer of frames' and producer zstd's, then over
producer zstd's alone; the worst against the target."""

from __future__ import annotations

from sidecar.bench.figure_tables import Document, flag, repeated, table


def savings_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [
        *repeated("--corpus", settings["corpora"]),
        *flag("--limit", settings["limit"]),
        *flag("--fills", settings["fills"]),
        *flag("--data-dir", settings["data_dir"]),
    ]


def savings_tables(doc: Document) -> list[str]:
    """Per corpus and fill, the product's stored bytes through the proxy and through the relay
    (one cell, `proxy · relay`) over the fewer of frames' and producer zstd's, then over
    producer zstd's alone; the worst against the target."""
    settings, rows = doc["settings"], doc["results"]
    fills: list[int] = settings["fills"]
    target: float = settings["target"]
    paths = [
        (name, prefix)
        for name, prefix in (("the proxy", ""), ("the relay", "relay_"))
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
    through = " · ".join(
        "the relay, its producer batching the fill" if prefix else name for name, prefix in paths
    )
    if len(paths) > 1:
        through += " (one figure where they are the same)"
    out = [
        "Bytes in the broker's log segments at each fill (records per batch, "
        f"{settings['batches']} batches a fill and {settings.get('min_records', 0):,} records at "
        "least, one partition; the dictionary trained on the corpus's first "
        f"{settings['sample']:,} values at most, measured on the values after them; –: too few "
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
    ]
