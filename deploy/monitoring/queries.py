"""The PromQL the dashboard is made of: label filters, rates, quantiles, the savings sums.

Rates use Grafana's `$__rate_interval`, totals over the time range `$__range`; `$namespace`
(multi-value, All = `.*`) filters the relay's series, `$job` (the Prometheus jobs that scrape a
sidecar) the process metrics and `up`.
"""

from __future__ import annotations

NS = 'namespace=~"$namespace"'
JOB = 'job=~"$job"'
RATE = "$__rate_interval"
#: "Per month" in the savings estimate: 30 days.
MONTH_SECONDS = 30 * 86_400

IN = f"zdict_input_bytes_total{{{NS}}}"
OUT = f"zdict_output_bytes_total{{{NS}}}"
MESSAGES = f"zdict_messages_total{{{NS}}}"


def sum_rate(metric: str, window: str = RATE, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}[{window}]))"


def quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{NS}}}[{RATE}])))"


RATIO = f"{sum_rate(IN)} / {sum_rate(OUT)}"
SAVED_PER_SECOND = f"{sum_rate(IN)} - {sum_rate(OUT)}"
SAVED_IN_RANGE = f"sum(increase({IN}[$__range])) - sum(increase({OUT}[$__range]))"
SAVED_PER_MONTH = f"({sum_rate(IN, '1h')} - {sum_rate(OUT, '1h')}) * {MONTH_SECONDS}"
PASSED_THROUGH = (
    f'1 - sum(rate(zdict_messages_total{{{NS}, outcome="compressed"}}[{RATE}])) '
    f"/ {sum_rate(MESSAGES)}"
)
