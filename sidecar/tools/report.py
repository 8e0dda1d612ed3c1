"""`zdict-sidecar report`: a PNG of what compression saved, for people who would rather look.

Two sources:

* **Prometheus** (`--prometheus URL`): the share saved and the bytes saved per second over a
  time range (`/api/v1/query_range`), per topic, and the summary over that range;
* **a sidecar's own /metrics** (`--metrics URL`, a relay's, a proxy's or an application's with
  the in-process producer): one snapshot, the totals since that process started. Without
  history, the figure shows bytes stored against the producer's own and records by outcome per
  topic instead of curves.

Saving is one definition (`sidecar.metrics.stored`): the bytes the broker stores for the records
the sidecar wrote (`zdict_stored_bytes_total`) against what the producer's own batches, with
its own codec at the same fill, would have stored (`zdict_stored_without_sidecar_bytes_total`).
Summary figures, in both: saved = producer's own - stored, and its share of the producer's own;
saved per second = saved / the time it was saved in (the range, or the process's uptime);
estimated per month = saved per second x 30 days. Per topic, a topic whose records were all
written raw says so (raw mode: its batches fill, the producer's codec compresses them and the
sidecar steps aside) instead of showing a ratio of 1. The value ratio (value bytes in / out,
before framing and the batch codec) is shown beside, named as such.

matplotlib is an optional dependency (`pip install 'zdict-sidecar[report]'`); it is imported
only to draw, after the numbers were fetched.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from sidecar.errors import ConfigError, InputError
from sidecar.tools.charts import figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "MONTH_SECONDS",
    "RAW_MODE_SHARE",
    "Report",
    "Summary",
    "TopicSaving",
    "format_summary",
    "from_metrics",
    "from_prometheus",
    "parse_duration",
    "write_png",
]

#: "Per month" in the estimate: 30 days, in seconds.
MONTH_SECONDS: Final = 30 * 86_400
#: Points per curve: enough for a smooth line on a 1,400-pixel-wide figure.
POINTS: Final = 240
HTTP_TIMEOUT_S: Final = 30.0

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus-style duration: `90s`, `30m`, `6h`, `7d`, `1w`.

    Raises:
        ConfigError: anything else, or zero.
    """
    match = _DURATION.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(f"--range/--rate-window {text!r}: give a duration like 90s, 30m, 6h, 7d")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def parse_time(text: str) -> float:
    """Unix seconds of `text`: Unix seconds (`1796310000`) or ISO 8601 (`2026-12-03T15:00:00Z`;
    without an offset, UTC).

    Raises:
        ConfigError: anything else.
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"--end {text!r}: give Unix seconds or an ISO 8601 time like 2026-12-03T15:00:00Z"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _promql_duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


#: A topic whose share of records written raw is at least this is in raw mode.
RAW_MODE_SHARE: Final = 0.99


@dataclass(frozen=True)
class TopicSaving:
    """One topic's bytes as stored, against the producer's own, and how much was written raw."""

    topic: str
    stored_bytes: float
    without_bytes: float
    #: Share of the topic's records written raw by the output mode (nan: no record counted).
    raw_share: float

    @property
    def saved_bytes(self) -> float:
        return self.without_bytes - self.stored_bytes

    def describe(self) -> str:
        """One line: the saving, or plainly that the topic is written raw."""
        if self.raw_share >= RAW_MODE_SHARE:
            return (
                "raw mode: its batches fill past the dictionary's crossover, so the values go "
                "as they came and the producer's codec compresses them (nothing to save: the "
                f"sidecar steps aside); stored {human_bytes(self.stored_bytes)}"
            )
        share = self.saved_bytes / self.without_bytes if self.without_bytes else math.nan
        line = (
            f"saved {share:.1%} against the producer's codec ({human_bytes(self.saved_bytes)}: "
            f"stored {human_bytes(self.stored_bytes)} of {human_bytes(self.without_bytes)})"
        )
        if self.raw_share > 0:
            line += f", {self.raw_share:.0%} of its records written raw"
        return line


@dataclass(frozen=True)
class Summary:
    """The headline numbers of a report. Bytes are as the broker stores them (value bytes, for
    the value ratio beside); times are Unix seconds."""

    source: str  # "prometheus" or "metrics"
    url: str
    namespace: str | None  # the topic regex asked for; None: every topic
    start: float  # the range start, or when the sidecar started counting
    end: float  # the range end, or when /metrics was read
    #: What the broker stores for the records written, and what the producer's own batches
    #: would have stored.
    stored_bytes: float
    without_bytes: float
    #: Prometheus: the mean of the bytes-saved-per-second curve, i.e. over the part of the range
    #: that has data (a sidecar deployed 10 minutes ago is not averaged over an hour);
    #: /metrics: bytes saved / the time since the sidecar started counting.
    saved_per_second: float
    #: Value bytes in and out of the encoders (nan: none counted, e.g. an in-process producer
    #: read from Prometheus).
    input_bytes: float = math.nan
    output_bytes: float = math.nan
    topics: tuple[TopicSaving, ...] = ()

    @property
    def ratio(self) -> float:
        """The value ratio: value bytes in / out."""
        return self.input_bytes / self.output_bytes if self.output_bytes else math.nan

    @property
    def saved_bytes(self) -> float:
        return self.without_bytes - self.stored_bytes

    @property
    def saved_share(self) -> float:
        return self.saved_bytes / self.without_bytes if self.without_bytes else math.nan

    @property
    def saved_per_month(self) -> float:
        return self.saved_per_second * MONTH_SECONDS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "ratio": self.ratio,
            "saved_bytes": self.saved_bytes,
            "saved_share": self.saved_share,
            "saved_per_month": self.saved_per_month,
            "topics": {
                t.topic: asdict(t) | {"saved_bytes": t.saved_bytes, "says": t.describe()}
                for t in self.topics
            },
        }


@dataclass(frozen=True)
class Curve:
    """One time series: Unix seconds and values."""

    times: list[float]
    values: list[float]


@dataclass
class Report:
    """Everything a PNG shows: the summary, and either curves (Prometheus) or bars (/metrics)."""

    summary: Summary
    saved_share: dict[str, Curve] = field(default_factory=dict)  # topic → share saved over time
    saved_per_second: dict[str, Curve] = field(default_factory=dict)  # topic → bytes/s
    #: topic → (producer's own, stored) bytes
    bytes_by_namespace: dict[str, tuple[float, float]] = field(default_factory=dict)
    outcomes: dict[str, dict[str, float]] = field(default_factory=dict)  # topic → counts


# -- Prometheus ----------------------------------------------------------------------------------


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        try:
            detail = json.load(exc).get("error", "")
        except ValueError:
            detail = ""
        raise InputError(f"Prometheus answered {exc.code} to {url}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError(f"cannot reach {url.split('/api/')[0]}: {reason}") from None
    except (ValueError, RecursionError):  # not JSON: not Prometheus's HTTP API
        body = None
    if not isinstance(body, dict):
        raise InputError(f"{url.split('/api/')[0]} did not answer like Prometheus: is it one?")
    return body


class Prometheus:
    """The two calls of the HTTP API a report needs."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _api(self, path: str, **params: str) -> Any:
        body = _get_json(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        if body.get("status") != "success":
            raise InputError(f"Prometheus refused a query: {body.get('error', body)}")
        return body["data"]

    def scalar(self, expr: str, at: float) -> float | None:
        """The value of an expression that yields at most one sample, at `at`; None: no sample."""
        data = self._api("query", query=expr, time=f"{at:.3f}")
        if not data["result"]:
            return None
        return float(data["result"][0]["value"][1])

    def curves(self, expr: str, start: float, end: float, step: float) -> dict[str, Curve]:
        """`expr` over [start, end] every `step` s, one curve per namespace label value."""
        data = self._api(
            "query_range",
            query=expr,
            start=f"{start:.3f}",
            end=f"{end:.3f}",
            step=f"{step:g}",
        )
        out: dict[str, Curve] = {}
        for series in data["result"]:
            name = series["metric"].get("topic", "all")
            points = [(float(t), float(v)) for t, v in series["values"]]
            out[name] = Curve([t for t, _ in points], [v for _, v in points])
        return out


def _topics(namespace: str | None) -> str:
    """The label matchers of the selected topics (the relay's input topic, the proxy's and the
    in-process producer's topic: the namespace)."""
    if namespace is None:
        return ""
    escaped = namespace.replace("\\", "\\\\").replace('"', '\\"')
    return f'topic=~"{escaped}"'


def _by_topic(prom: Prometheus, expr: str, at: float) -> dict[str, float]:
    return {name: curve.values[-1] for name, curve in prom.curves(expr, at, at, 1.0).items()}


def _topic_savings(
    stored: Mapping[str, float],
    without: Mapping[str, float],
    raw: Mapping[str, tuple[float, float]],
) -> tuple[TopicSaving, ...]:
    """Per topic; `raw`: topic → (records written raw, records)."""
    out = []
    for topic in sorted(stored):
        raw_records, records = raw.get(topic, (0.0, 0.0))
        share = raw_records / records if records else math.nan
        out.append(TopicSaving(topic, stored[topic], without.get(topic, stored[topic]), share))
    return tuple(out)


def from_prometheus(
    url: str,
    namespace: str | None,
    range_seconds: float,
    rate_window: float | None = None,
    end: float | None = None,
) -> Report:
    """Query Prometheus for the last `range_seconds` up to `end` (default now).

    Curves use rates over `rate_window` (default the larger of 4 steps and 1 minute: at least
    4 scrapes at the usual intervals). Raises `InputError` when Prometheus is unreachable,
    refuses a query, or has no zdict data for the selection.
    """
    prom = Prometheus(url)
    end = time.time() if end is None else end
    start = end - range_seconds
    topics = _topics(namespace)
    selector = f"{{{topics}}}"
    encode = f'{{{topics}{", " if topics else ""}op="encode"}}'
    window = _promql_duration(range_seconds)

    def increase(metric: str, matchers: str = selector, by: str = "") -> str:
        grouping = f" by ({by})" if by else ""
        return f"sum{grouping} (increase({metric}{matchers}[{window}]))"

    stored = _by_topic(prom, increase("zdict_stored_bytes_total", by="topic"), end)
    if not stored:
        which = f"topic =~ {namespace!r}" if namespace else "any topic"
        raise InputError(
            f"Prometheus at {url} has no zdict_stored_bytes_total for {which} in the last "
            f"{window}: is it scraping a sidecar (deploy/prometheus/prometheus.yml)?"
        )
    without = _by_topic(prom, increase("zdict_stored_without_sidecar_bytes_total", by="topic"), end)
    raw: dict[str, tuple[float, float]] = {}
    for records, matchers in (
        ("zdict_records_total", encode),
        ("zdict_producer_records_total", selector),
    ):
        counted = _by_topic(prom, increase(records, matchers, "topic"), end)
        raw_matchers = matchers[:-1] + (", " if matchers != "{}" else "") + 'outcome="raw"}'
        written_raw = _by_topic(prom, increase(records, raw_matchers, "topic"), end)
        for topic, n in counted.items():
            before = raw.get(topic, (0.0, 0.0))
            raw[topic] = (before[0] + written_raw.get(topic, 0.0), before[1] + n)
    in_bytes = prom.scalar(increase("zdict_input_bytes_total", encode), end)
    out_bytes = prom.scalar(increase("zdict_output_bytes_total", encode), end)
    step = max(1.0, range_seconds / POINTS)
    rate = _promql_duration(rate_window or max(4 * step, 60.0))
    rate_stored = f"sum by (topic) (rate(zdict_stored_bytes_total{selector}[{rate}]))"
    rate_without = (
        f"sum by (topic) (rate(zdict_stored_without_sidecar_bytes_total{selector}[{rate}]))"
    )
    saved = f"{rate_without} - {rate_stored}"
    total = prom.curves(f"sum({saved})", start, end, step)
    points = [v for curve in total.values() for v in curve.values if math.isfinite(v)]
    saved_per_second = sum(points) / len(points) if points else math.nan
    summary = Summary(
        "prometheus",
        url,
        namespace,
        start,
        end,
        sum(stored.values()),
        sum(without.get(t, v) for t, v in stored.items()),
        saved_per_second,
        math.nan if in_bytes is None else in_bytes,
        math.nan if out_bytes is None else out_bytes,
        _topic_savings(stored, without, raw),
    )
    return Report(
        summary,
        saved_share=prom.curves(f"({saved}) / {rate_without}", start, end, step),
        saved_per_second=prom.curves(saved, start, end, step),
    )


# -- a sidecar's /metrics ------------------------------------------------------------------------


_Tally = tuple[
    dict[str, float], dict[str, float], list[float], list[float], dict[str, dict[str, float]]
]


def _tally(samples: list[Sample], namespace: str | None) -> _Tally:
    """Per selected topic: stored bytes, the producer's own, [value bytes in, out], when the
    sidecar began counting them (`zdict_input_bytes_created`; else when the process started),
    records by outcome."""
    pattern = re.compile(namespace) if namespace else None
    stored: dict[str, float] = defaultdict(float)
    without: dict[str, float] = defaultdict(float)
    values = [0.0, 0.0]
    created: list[float] = []
    outcomes: dict[str, dict[str, float]] = defaultdict(dict)
    started: list[float] = []
    for sample in samples:
        if sample.name == "process_start_time_seconds":
            started.append(sample.value)
        topic = sample.labels.get("topic")
        if topic is None or sample.labels.get("op", "encode") != "encode":
            continue
        if pattern is not None and not pattern.fullmatch(topic):
            continue
        if sample.name == "zdict_stored_bytes_total":
            stored[topic] += sample.value
        elif sample.name == "zdict_stored_without_sidecar_bytes_total":
            without[topic] += sample.value
        elif sample.name == "zdict_input_bytes_created":
            created.append(sample.value)
        elif sample.name in ("zdict_input_bytes_total", "zdict_producer_input_bytes_total"):
            values[0] += sample.value
        elif sample.name in ("zdict_output_bytes_total", "zdict_producer_output_bytes_total"):
            values[1] += sample.value
        elif sample.name in ("zdict_records_total", "zdict_producer_records_total"):
            outcome = sample.labels.get("outcome", "?")
            outcomes[topic][outcome] = outcomes[topic].get(outcome, 0.0) + sample.value
    return stored, without, values, created or started, outcomes


def from_metrics(url: str, namespace: str | None = None) -> Report:
    """One scrape of a sidecar's /metrics: totals per topic since the process started.

    The start is the earliest `zdict_input_bytes_created` of the selected topics (when the
    sidecar began counting them), else the process's start.
    """
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            text = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(f"cannot read {url}: {getattr(exc, 'reason', exc)}") from None
    read_at = time.time()
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError as exc:
        raise InputError(f"{url} does not serve Prometheus metrics: {exc}") from None
    stored, without, values, created, outcomes = _tally(samples, namespace)
    if not stored:
        raise InputError(
            f"{url} exposes no zdict_stored_bytes_total: is it a zdict-sidecar (or an "
            "application's producer) that has written a record batch?"
        )
    start = min(created) if created else read_at
    uptime = read_at - start
    raw = {t: (o.get("raw", 0.0), sum(o.values())) for t, o in outcomes.items()}
    topics = _topic_savings(stored, without, raw)
    saved = sum(t.saved_bytes for t in topics)
    summary = Summary(
        "metrics",
        url,
        namespace,
        start,
        read_at,
        sum(stored.values()),
        sum(t.without_bytes for t in topics),
        saved / uptime if uptime > 0 else math.nan,
        values[0] or math.nan,
        values[1] or math.nan,
        topics,
    )
    return Report(
        summary,
        bytes_by_namespace={t.topic: (t.without_bytes, t.stored_bytes) for t in topics},
        outcomes={ns: dict(sorted(o.items())) for ns, o in sorted(outcomes.items())},
    )


# -- text and picture ----------------------------------------------------------------------------


def human_bytes(value: float) -> str:
    """1536 → '1.5 KiB' (IEC units, as Grafana's `bytes`)."""
    if not math.isfinite(value):
        return "n/a"
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{sign}{value:,.0f} {unit}" if unit == "B" else f"{sign}{value:,.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _when(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def summary_lines(summary: Summary) -> list[tuple[str, str]]:
    """(label, value) pairs of the summary, as printed and drawn."""
    span = "in the range" if summary.source == "prometheus" else "since the sidecar started"
    share = summary.saved_share
    value_ratio = summary.ratio
    return [
        (
            "saved against the producer's codec",
            f"{share:.1%}" if math.isfinite(share) else "n/a",
        ),
        (f"bytes saved {span}", human_bytes(summary.saved_bytes)),
        ("bytes saved per second", human_bytes(summary.saved_per_second) + "/s"),
        ("estimated per month (30 days)", human_bytes(summary.saved_per_month)),
        (
            "stored / producer's own",
            f"{human_bytes(summary.stored_bytes)} / {human_bytes(summary.without_bytes)}",
        ),
        (
            "value ratio (values only)",
            f"{value_ratio:.3f}" if math.isfinite(value_ratio) else "n/a",
        ),
    ]


def format_summary(summary: Summary, out: Path | None = None) -> str:
    """The summary as text, for the terminal: the totals, then each topic."""
    which = summary.namespace or "all topics"
    lines = [
        f"{which}, {_when(summary.start)} to {_when(summary.end)} "
        f"({summary.end - summary.start:,.0f} s), "
        f"from {summary.url}"
    ]
    width = max(len(label) for label, _ in summary_lines(summary))
    lines += [f"  {label:<{width}}  {value}" for label, value in summary_lines(summary)]
    lines += [f"  {t.topic}: {t.describe()}" for t in summary.topics]
    if out is not None:
        lines.append(f"wrote {out}")
    return "\n".join(lines)


def _iec(largest: float) -> tuple[float, str]:
    """The IEC unit to show values up to `largest` bytes in: (bytes per unit, unit name)."""
    for power, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB")):
        if abs(largest) < 1024 ** (power + 1) or unit == "TiB":
            return float(1024**power), unit
    raise AssertionError("unreachable")


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _utc(unix: float) -> datetime:
    """Naive UTC: the time axis shows UTC whatever the machine's time zone."""
    return datetime.fromtimestamp(unix, UTC).replace(tzinfo=None)


def _plot_curves(axes: Axes, curves: Mapping[str, Curve], scale: float = 1.0) -> None:
    import numpy

    for name, curve in sorted(curves.items()):
        times = numpy.array([_utc(t) for t in curve.times], dtype="datetime64[ms]")
        values = [v / scale for v in curve.values]
        axes.plot(times, values, label=_short(name), linewidth=1.6)
    axes.grid(True, alpha=0.3)
    if len(curves) > 1:
        axes.legend(loc="best", fontsize="small")
    if not curves:
        axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)


def _finite(curves: Mapping[str, Curve]) -> list[float]:
    return [v for curve in curves.values() for v in curve.values if math.isfinite(v)]


def write_png(report: Report, out: Path) -> None:
    """Draw `report` into `out` (1,400 × 1,000 pixels); see `charts.require_matplotlib`."""
    fig = figure(figsize=(14, 10), dpi=100, layout="constrained")
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    summary = report.summary
    grid = fig.add_gridspec(2, 1, height_ratios=(1.0, 4.0))
    top, bottom = fig.add_subfigure(grid[0]), fig.add_subfigure(grid[1])
    which = summary.namespace or "all topics"
    top.suptitle(
        f"zdict-sidecar savings: {_short(which, 60)}\n"
        f"{_when(summary.start)} to {_when(summary.end)}",
        fontsize=15,
    )
    cells = summary_lines(summary)[:4]
    for i, (label, value) in enumerate(cells):
        x = (i + 0.5) / len(cells)
        top.text(x, 0.38, value, ha="center", va="center", fontsize=24, weight="bold")
        top.text(x, 0.12, label, ha="center", va="center", fontsize=11, color="dimgray")

    if summary.source == "prometheus":
        share_ax, saved_ax = bottom.subplots(2, 1, sharex=True)
        _plot_curves(share_ax, report.saved_share)
        shares = _finite(report.saved_share)
        # From 0 (nothing saved, as in raw mode) up: small wiggles do not look like swings.
        share_ax.axhline(0.0, color="gray", linestyle="--", linewidth=1)
        share_ax.set_ylim(min([0.0, *shares]) - 0.05, max([0.0, *shares]) + 0.05)
        share_ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:.0%}")
        share_ax.set_title(
            "saved against the producer's codec (share of what it would store)", loc="left"
        )
        share_ax.tick_params(axis="x", labelbottom=False)
        share_ax.xaxis.get_offset_text().set_visible(False)
        saved_values = _finite(report.saved_per_second)
        scale, unit = _iec(max([0.0, *(abs(v) for v in saved_values)]))
        _plot_curves(saved_ax, report.saved_per_second, scale)
        saved_ax.set_title(f"bytes saved per second ({unit}/s)", loc="left")
        # matplotlib.dates carries no type annotations
        locator = AutoDateLocator()  # type: ignore[no-untyped-call]
        saved_ax.xaxis.set_major_locator(locator)
        saved_ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
        saved_ax.set_xlabel("time (UTC)")
        # The whole range asked for, so a gap before the first sample shows as a gap.
        saved_ax.set_xlim(_utc(summary.start), _utc(summary.end))
    else:
        bytes_ax, outcome_ax = bottom.subplots(2, 1)
        names = list(report.bytes_by_namespace)
        ins = [report.bytes_by_namespace[n][0] for n in names]
        outs = [report.bytes_by_namespace[n][1] for n in names]
        scale, unit = _iec(max([0.0, *ins, *outs]))
        rows = range(len(names))
        bytes_ax.barh(
            [r + 0.2 for r in rows], [v / scale for v in ins], 0.4, label="producer's own"
        )
        bytes_ax.barh([r - 0.2 for r in rows], [v / scale for v in outs], 0.4, label="stored")
        bytes_ax.set_yticks(list(rows), [_short(n) for n in names])
        bytes_ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False)
        bytes_ax.set_title(f"bytes as stored since the sidecar started ({unit})", loc="left")
        outcomes = sorted({o for counts in report.outcomes.values() for o in counts})
        spaces = list(report.outcomes)
        left = [0.0] * len(spaces)
        for outcome in outcomes:
            shares = []
            for ns in spaces:
                total = sum(report.outcomes[ns].values())
                shares.append(report.outcomes[ns].get(outcome, 0.0) / total if total else 0.0)
            if any(shares):
                outcome_ax.barh(range(len(spaces)), shares, 0.6, left=left, label=outcome)
                left = [a + b for a, b in zip(left, shares, strict=True)]
        outcome_ax.set_yticks(range(len(spaces)), [_short(n) for n in spaces])
        outcome_ax.set_xlim(0, 1)
        outcome_ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:.0%}")
        outcome_ax.legend(
            loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(outcomes), frameon=False
        )
        outcome_ax.set_title("records by outcome (share of each namespace)", loc="left")
    top.text(0.5, 0.0, f"source: {summary.url}", ha="center", va="bottom", fontsize=8, color="gray")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
