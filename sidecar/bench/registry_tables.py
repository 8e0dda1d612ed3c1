"""`bench registry`'s table from its JSON: printed by the bench and rendered on FIGURES.md
(`sidecar.bench.figures`). One column per registry size measured and one projected
(`sidecar.bench.registry.projection`); a row per reader and figure, medians with [min–max] of
the runs (`spread`). Bytes read are also shown as a share of the registry's bytes: issue 38's
targets (at 10,000 dictionaries: one topic ≤ 3 s, ≤ 120 MiB, ≤ 5 % read; 100 topics ≤ 6 s,
≤ 200 MiB; a non-active dictionary within 1 s; `dicts list` ≤ 10 s, ≤ 200 MiB) are next to them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Final

from sidecar.bench.figure_tables import Document, flag, spread, table

#: A year of daily retraining over 100 topics: the size the table projects to.
PROJECTED: Final = 36_500
PROJECTED_FIGURES: Final = ("seconds", "rss_mib", "bytes_read")
SECONDS: Final = "{:.2f}"
MIB_FMT: Final = "{:,.0f}"
MB_FMT: Final = "{:,.1f}"
#: The readers' names in the table, by their key in the JSON.
NAMES: Final = {
    "proxy_1": "proxy, 1 topic",
    "proxy_all": "proxy, all topics",
    "consumer": "consumer",
    "dicts_list": "`dicts list --registry`",
}
TARGETS: Final = {
    ("proxy_1", "seconds"): "≤ 3",
    ("proxy_1", "rss_mib"): "≤ 120",
    ("proxy_1", "share"): "≤ 5 %",
    ("proxy_all", "seconds"): "≤ 6",
    ("proxy_all", "rss_mib"): "≤ 200",
    ("consumer", "older_s"): "≤ 1",
    ("dicts_list", "seconds"): "≤ 10",
    ("dicts_list", "rss_mib"): "≤ 200",
}


def registry_flags(doc: Document) -> list[str]:
    settings = doc["settings"]
    return [
        *flag("--levels", settings["levels"]),
        *flag("--namespaces", settings["namespaces"]),
        *flag("--size", settings["size"]),
        *flag("--runs", settings["runs"]),
    ]


def _values(readings: Sequence[Document], name: str, scale: float = 1.0) -> list[float]:
    return [r[name] * scale for r in readings if r.get(name) is not None]


def projection(levels: Sequence[Document], reader: str, name: str) -> float | None:
    """A reader's median `name` at `PROJECTED` dictionaries, linear from the two largest N
    measured, flat where it fell between them (noise); None with fewer than two."""
    if len(levels) < 2:
        return None
    low, high = levels[-2], levels[-1]
    a, b = (_values(level["readings"][reader], name) for level in (low, high))
    if not a or not b:
        return None
    first, last = statistics.median(a), statistics.median(b)
    scale = (PROJECTED - low["dictionaries"]) / (high["dictionaries"] - low["dictionaries"])
    return float(max(last, first + (last - first) * scale))


def _rows(doc: Document) -> list[list[str]]:
    levels: Sequence[Document] = doc["results"]["levels"]
    rows: list[list[str]] = [
        ["registry, MB", *(f"{lv['registry_bytes'] / 1e6:,.1f}" for lv in levels), "", ""],
        ["publishing up to it, s", *(f"{lv['populate_s']:.0f}" for lv in levels), "", ""],
    ]
    figures = (
        ("seconds", "start, s", SECONDS, 1.0),
        ("rss_mib", "peak RSS, MiB", MIB_FMT, 1.0),
        ("bytes_read", "registry read, MB", MB_FMT, 1e-6),
        ("share", "read / registry", "{:.1%}", 1.0),
        ("store_bytes", "store written, MB", MB_FMT, 1e-6),
        ("store_files", "store files", "{:,.0f}", 1.0),
        ("older_s", "then a non-active dictionary's record, s", "{:.3f}", 1.0),
    )
    for reader, title in NAMES.items():
        for name, what, fmt, scale in figures:
            cells: list[str] = []
            for lv in levels:
                readings = lv["readings"][reader]
                if name == "share":
                    values = [r["bytes_read"] / lv["registry_bytes"] for r in readings]
                else:
                    values = _values(readings, name, scale)
                cells.append(spread(values, fmt) if values else "")
            if not any(cells):
                continue
            guess = projection(levels, reader, name) if name in PROJECTED_FIGURES else None
            cells.append("" if guess is None else "~" + fmt.format(guess * scale))
            rows.append([f"{title}: {what}", *cells, TARGETS.get((reader, name), "")])
    return rows


def registry_tables(doc: Document) -> list[str]:
    levels: Sequence[Document] = doc["results"]["levels"]
    bases: Sequence[Document] = doc["results"]["bases"]
    settings = doc["settings"]
    headers = [
        "dictionaries in the registry",
        *(f"{lv['dictionaries']:,}" for lv in levels),
        "36,500 (projected)",
        "issue 38 at 10,000",
    ]
    sizes = ", ".join(f"{b['size']:,}" for b in bases)
    return [
        f"A registry of N dictionaries ({len(bases)} trained ones of {sizes} bytes under "
        f"distinct ids) across {settings['namespaces']} namespaces; each reader a fresh "
        "process, its start: spawn to its first answer (the proxy serving 1 topic, then a topic "
        f"per namespace); median [min–max] of {settings['runs']} runs; projected linearly from "
        "the two largest N:",
        "",
        *table(headers, _rows(doc)),
    ]
