"""PromQL checks shared by the unit and integration tests of the monitoring files.

What a dashboard or a rule queries is read out of the files themselves:

* `dashboard_queries` walks a Grafana dashboard: every panel target, every Prometheus
  annotation and every query variable;
* `rule_expressions` reads Prometheus rule files: every alert and recording rule;
* `substitute` replaces Grafana's template variables (`$namespace`, `$__rate_interval`, ...)
  with the values a test chooses, and fails on a variable it was not given;
* `metric_names` lists the metric names an expression selects, and `exported_names` the names
  a `/metrics` exposition declares (families without samples included);
* `strip_conditions` turns an alert condition `EXPRESSION OP NUMBER` into `EXPRESSION`, and
  `absent(X)` into `(X)`.

**The rule for conditions.** An alert (or annotation) condition is false while everything is
well, so its result is empty and proves nothing. The tests therefore evaluate it with every
comparison against a number literal removed: `up == 0` becomes `up`, `(changes(x[2m]) > 0) * y`
becomes `(changes(x[2m])) * y`, `a > 10000 and deriv(a[15m]) > 0` becomes `a and deriv(a[15m])`.
What remains selects the same series, so a non-empty result proves that every metric and label
join the condition relies on exists. A comparison between two vectors cannot be stripped that way
and is refused: write conditions as `EXPRESSION OP NUMBER` (the ratio alert divides first).
`absent(X)` is empty while all is well too; what it can get wrong is X itself (a job name no
target has makes it fire for ever), so the stripped condition is X, which must select series.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

#: kube-state-metrics families the alerts read (kube-prometheus-stack scrapes them): what the
#: cluster knows of the sidecar's container, its exits and restarts, that a process exiting
#: before its next scrape cannot tell. No sidecar exports them, so the tests that ask a
#: sidecar's Prometheus for series leave them out.
CLUSTER_METRICS = frozenset(
    {
        "kube_pod_container_status_last_terminated_reason",
        "kube_pod_init_container_status_last_terminated_reason",
        "kube_pod_container_status_restarts_total",
        "kube_pod_init_container_status_restarts_total",
    }
)

#: PromQL words that look like metric names but are not.
KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"bool", "offset", "inf", "nan", "atan2"}
)

_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_LABEL_LISTS = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
# An identifier not glued to a number or another name: `5m` and `1e3` are not metric names.
_IDENT = re.compile(r"(?<![0-9.A-Za-z_:])[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# `OP NUMBER` where the number is a whole operand: followed by `)`, the end, or a set operator.
_CONDITION = re.compile(
    rf"\s*(?:==|!=|>=|<=|>|<)\s*(?:bool\s+)?{_NUMBER}(?=\s*(?:\)|$|\b(?:and|or|unless)\b))"
)
_COMPARISON = re.compile(r"==|!=|>=|<=|(?<![=!])[<>]")
_ABSENT = re.compile(r"\babsent\s*\(")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
_LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(?:(?P<metric>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$"
)


@dataclass(frozen=True)
class Query:
    """One PromQL expression of a monitoring file and where it comes from."""

    source: str  # e.g. "panel 'Compression ratio' A", "alert ZdictSidecarDown"
    expr: str
    condition: bool = False  # an alert or annotation condition: evaluated stripped


@dataclass(frozen=True)
class Variable:
    """A Grafana query variable `label_values(selector, label)`."""

    name: str
    metric: str | None  # the series selector, e.g. `zdict_build_info{job=~"$job"}`
    label: str


def _without_strings_and_selectors(expr: str) -> str:
    out = _STRINGS.sub('""', expr)
    out = _MATCHERS.sub(" ", out)
    return _RANGES.sub(" ", out)


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects (functions, keywords, label names and template
    variables left out)."""
    text = _LABEL_LISTS.sub(" ", _VARIABLE.sub(" 1 ", _without_strings_and_selectors(expr)))
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        word = match.group()
        if word.lower() in KEYWORDS:
            continue
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        names.add(word)
    # `{__name__="x"}` selects a metric too.
    names.update(re.findall(r'__name__\s*=\s*"([^"]+)"', expr))
    return names


def strip_conditions(expr: str) -> str:
    """`expr` with every `OP NUMBER` comparison removed and `absent(X)` turned into `(X)` (see
    the module docstring).

    Raises:
        ValueError: a comparison is left that is not against a number literal.
    """
    stripped = _ABSENT.sub("(", _CONDITION.sub("", expr))
    if _COMPARISON.search(_without_strings_and_selectors(stripped)):
        raise ValueError(
            f"a comparison in {expr!r} is not of the form EXPRESSION OP NUMBER, so the "
            "series it relies on cannot be evaluated on their own"
        )
    return stripped


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with Grafana's `$var`, `${var}`, `${var:fmt}` and `[[var]]` replaced.

    Raises:
        KeyError: a variable that `values` does not define (a typo in a panel, or a new
            variable the test must learn about).
    """

    def replace(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        if name not in values:
            raise KeyError(f"template variable ${name} in {expr!r} has no test value")
        return values[name]

    return _VARIABLE.sub(replace, expr)


def _panels(panels: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a collapsed row holds its panels


def dashboard_queries(dashboard: Mapping[str, Any]) -> list[Query]:
    """Every PromQL expression of a dashboard: panel targets and Prometheus annotations."""
    queries: list[Query] = []
    for panel in _panels(dashboard.get("panels", [])):
        queries += [
            Query(
                f"panel {panel.get('title')!r} {target.get('refId', '')}".rstrip(), target["expr"]
            )
            for target in panel.get("targets", [])
            if target.get("expr")
        ]
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            queries.append(
                Query(f"annotation {annotation.get('name')!r}", annotation["expr"], True)
            )
    return queries


def dashboard_variables(dashboard: Mapping[str, Any]) -> list[Variable]:
    """The dashboard's query variables, which must all be `label_values(...)` calls."""
    variables: list[Variable] = []
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, Mapping) else str(query)
        match = _LABEL_VALUES.match(text)
        if match is None:
            raise ValueError(f"variable {variable.get('name')}: {text!r} is not label_values()")
        variables.append(Variable(variable["name"], match.group("metric"), match.group("label")))
    return variables


def load_rule_groups(text: str) -> list[Mapping[str, Any]]:
    """The `groups` of a Prometheus rule file."""
    document = yaml.safe_load(text)
    groups: list[Mapping[str, Any]] = document["groups"]
    return groups


def rule_expressions(groups: Iterable[Mapping[str, Any]]) -> list[Query]:
    """Every alert (a condition) and recording rule of `groups`."""
    queries: list[Query] = []
    for group in groups:
        for rule in group["rules"]:
            if "alert" in rule:
                queries.append(Query(f"alert {rule['alert']}", rule["expr"], True))
            else:
                queries.append(Query(f"record {rule['record']}", rule["expr"]))
    return queries


def recorded_names(groups: Iterable[Mapping[str, Any]]) -> set[str]:
    """The series names the recording rules of `groups` create."""
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


#: Sample names a metric family of each type exposes, by suffix (prometheus_client's text format
#: declares a counter by its `_total` name; `_created` is when a labelled series was created).
_TYPE_SUFFIXES = {
    "counter": ("_created",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
}


def exported_names(exposition: str) -> set[str]:
    """Every metric name a Prometheus text exposition declares or samples.

    Families without samples (a counter whose labels appear only on failure) count: they are
    exported, with their `# TYPE` line, from the process's start.
    """
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            base = name.removesuffix("_total") if kind.strip() == "counter" else name
            names.update(base + suffix for suffix in _TYPE_SUFFIXES.get(kind.strip(), ()))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def unknown_metrics(queries: Iterable[Query], known: set[str]) -> dict[str, set[str]]:
    """For each query selecting a metric outside `known`: its source → the unknown names."""
    unknown: dict[str, set[str]] = {}
    for query in queries:
        missing = metric_names(query.expr) - known
        if missing:
            unknown[query.source] = missing
    return unknown
