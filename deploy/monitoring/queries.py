"""The PromQL the dashboard is made of: label filters, rates, quantiles, the savings sums.

Rates use Grafana's `$__rate_interval`, totals over the time range `$__range`. Every query is
filtered by `$cluster` and `$namespace` (the target's labels on a Prometheus shared by several
clusters or namespaces, where same-named topics must not be summed; All = `.*`, which also
matches series without the label), `$job` (the Prometheus jobs that scrape a sidecar) and
`$instance`, and the relay's series by `$topic` (the input topics; multi-value, All = `.*`).
The savings are the encoding relays' (`op="encode"`): a decoding relay's bytes go the other
way. The cost estimate takes its prices and the topics' retention from the dashboard's
constants.
"""

from __future__ import annotations

CLUSTER = 'cluster=~"$cluster"'
NAMESPACE = 'namespace=~"$namespace"'
JOB = 'job=~"$job"'
INSTANCE = 'instance=~"$instance"'
TOPIC = 'topic=~"$topic"'
ENCODE = 'op="encode"'
#: Every series of the selected sidecars.
ON = f"{CLUSTER}, {NAMESPACE}, {JOB}, {INSTANCE}"
#: Their series of the selected topics.
SEL = f"{ON}, {TOPIC}"
#: Their encoding side.
ENC = f"{SEL}, {ENCODE}"
RATE = "$__rate_interval"
#: "Per month" in the savings estimate: 30 days.
MONTH_SECONDS = 30 * 86_400
#: Bytes in a GB, the unit cloud storage and transfer are priced in (PromQL's spelling).
GB = "1e9"

IN = f"zdict_input_bytes_total{{{ENC}}}"
OUT = f"zdict_output_bytes_total{{{ENC}}}"
MESSAGES = f"zdict_records_total{{{ENC}}}"
STORED = f"zdict_output_stored_bytes_total{{{SEL}}}"
STORED_RECORDS = f"zdict_output_stored_records_total{{{SEL}}}"
BATCHES = f"zdict_output_batches_total{{{SEL}}}"


def sum_rate(metric: str, window: str = RATE, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}[{window}]))"


def quantile(q: float, histogram: str, selector: str = SEL) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{selector}}}[{RATE}])))"


RATIO = f"{sum_rate(IN)} / {sum_rate(OUT)}"
SAVED_PER_SECOND = f"{sum_rate(IN)} - {sum_rate(OUT)}"
SAVED_IN_RANGE = f"sum(increase({IN}[$__range])) - sum(increase({OUT}[$__range]))"
SAVED_PER_MONTH = f"({sum_rate(IN, '1h')} - {sum_rate(OUT, '1h')}) * {MONTH_SECONDS}"
PASSED_THROUGH = (
    f'1 - sum(rate(zdict_records_total{{{ENC}, outcome="compressed"}}[{RATE}])) '
    f"/ {sum_rate(MESSAGES)}"
)
#: What the broker stores for the output per record: batch and record framing, key, headers,
#: frame, after any batch compression.
STORED_PER_RECORD = f"{sum_rate(STORED)} / {sum_rate(STORED_RECORDS)}"
#: The same records with their raw values in place of the frames, against what is stored: the
#: framing both carry dilutes the value ratio. With batch compression on the output, the raw
#: estimate leaves it out: a lower bound.
STORED_RATIO = f"({sum_rate(STORED)} + {SAVED_PER_SECOND}) / {sum_rate(STORED)}"
#: Bytes saved per month (the last hour's rate), priced: the output topics hold
#: `$retention_days` of them on `$replicas` replicas at `$storage_price` per GB-month, and move
#: them `$transfers` times over priced links at `$transfer_price` per GB.
COST_SAVED_PER_MONTH = (
    f"({sum_rate(IN, '1h')} - {sum_rate(OUT, '1h')}) / {GB} * ("
    "$retention_days * 86400 * $replicas * $storage_price"
    f" + {MONTH_SECONDS} * $transfers * $transfer_price)"
)
