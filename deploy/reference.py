"""The reference generated from the code: every setting, from the pydantic-settings tree
(`sidecar.config`), and every metric, from its one definition (`sidecar.metrics`,
`sidecar.proxy`'s, `sidecar.serde.metrics`), as `sidecar/REFERENCE.md` holds them.

`python -m deploy.reference` prints the page, `--out FILE` writes it (`make reference`);
`tests/deploy/test_reference.py` fails while the committed page differs, so a setting or a
metric is described in its code and nowhere by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from sidecar.config import ENV_DELIMITER, ENV_PREFIX, environment_variables
from sidecar.metrics import Metrics
from sidecar.proxy.fetch_metrics import FetchMetrics
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.serde.metrics import ProducerMetrics

ROOT: Final = Path(__file__).resolve().parents[1]
PAGE: Final = ROOT / "sidecar" / "REFERENCE.md"

HEADER: Final = """# Reference: every setting and every metric

Generated from the code by `make reference`; do not edit it by hand. How settings are given:
[the package's README](README.md#configuration); the metrics in use:
[Monitoring](../deploy/README.md#monitoring)."""

#: The suffix a family's samples carry in the exposition, by type.
_EXPOSED_SUFFIX: Final = {"counter": "_total", "info": "_info"}
#: Labels Prometheus's exposition adds to a family's samples.
_SAMPLE_LABELS: Final = frozenset({"le", "quantile"})


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family as the exposition names it."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str


class _Recording(CollectorRegistry):
    """A registry that keeps the collectors registered on it, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        super().register(collector)
        self.collectors.append(collector)


def _families(collector: Collector) -> Iterator[Family]:
    # prometheus_client keeps a metric's label names in `_labelnames` only (on a wrapper, and
    # on a family a custom collector builds); an info's come with its one sample.
    declared: tuple[str, ...] = getattr(collector, "_labelnames", ())
    for metric in collector.collect():
        names = [*declared, *getattr(metric, "_labelnames", ())]
        names += [k for s in metric.samples for k in s.labels if k not in _SAMPLE_LABELS]
        name = metric.name + _EXPOSED_SUFFIX.get(metric.type, "")
        yield Family(name, metric.type, tuple(dict.fromkeys(names)), metric.documentation)


def families(registry: _Recording) -> list[Family]:
    """The `zdict_*` families of `registry`, in the order their code defines them."""
    found = (f for c in registry.collectors for f in _families(c))
    return [f for f in found if f.name.startswith("zdict_")]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def metric_tables() -> list[str]:
    """Every metric the code defines, one table per process that exports them."""
    process, application = _Recording(), _Recording()
    metrics = Metrics(process)
    relay = families(process)
    ForwardMetrics(process, metrics.stored)
    FetchMetrics(process)
    proxy = [f for f in families(process) if f not in relay]
    ProducerMetrics(application)
    producer = [f for f in families(application) if f not in relay]
    lines: list[str] = []
    for title, found in (
        ("Every process: `run` and `proxy`", relay),
        ("The proxy's own", proxy),
        (
            "The in-process producer's (`sidecar.serde`, on the application's registry; the "
            '`zdict_stored_*` families above too, `path="producer"`, and '
            "`zdict_batch_compression_level`)",
            producer,
        ),
    ):
        rows = [(f"`{f.name}`", f.type, ", ".join(f.labels), f.help) for f in found]
        lines += ["", f"### {title}", "", *_table(("metric", "type", "labels", "meaning"), rows)]
    return lines


def settings_tables() -> list[str]:
    """Every environment variable the settings tree reads, with its meaning and default: one
    table per section (`ZDICT_<SECTION>__*`), the top-level ones first."""
    sections: dict[str, list[tuple[str, str]]] = {}
    for name, text in environment_variables():
        section, _, rest = name.removeprefix(ENV_PREFIX).rpartition(ENV_DELIMITER)
        if not name.startswith(ENV_PREFIX) or not section:
            section, rest = "", name
        sections.setdefault(section, []).append((f"`{rest}`", text))
    lines: list[str] = []
    for section, rows in sections.items():
        title = f"`{ENV_PREFIX}{section}{ENV_DELIMITER}…`" if section else "Top level"
        lines += ["", f"### {title}", "", *_table(("setting", "meaning (choices, default)"), rows)]
    return lines


def page() -> str:
    """The whole reference page."""
    return (
        "\n".join(
            [
                HEADER,
                "",
                "## Settings",
                "",
                "Each as its environment variable; in a TOML file the same names lower-cased, "
                "`__` a table (`ZDICT_CODEC__LEVEL` is `level` under `[codec]`).",
                *settings_tables(),
                "",
                "## Metrics",
                "",
                "Counters and histograms also expose `*_created`; an `info` carries the values it "
                "reports as labels too (a dictionary's `dict_id` and `version`); `process_*` (CPU, "
                "memory, file descriptors, start time) come from prometheus_client.",
                *metric_tables(),
            ]
        )
        + "\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.reference",
        description="the settings and metrics reference, generated from the code",
    )
    parser.add_argument("--out", type=Path, help="write the page here (default: print it)")
    args = parser.parse_args(argv)
    if args.out is None:
        sys.stdout.write(page())
    else:
        args.out.write_text(page(), encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
