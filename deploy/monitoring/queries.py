"""The PromQL the dashboard is made of: label filters, rates, quantiles, the savings sums.

The per-topic rates (bytes, records by outcome, what is stored, the codec's time per record,
the latency buckets) are read from the recording rules of deploy/prometheus/rules.yml (the
heavy expressions, evaluated once by Prometheus rather than at every refresh): those series are
per topic, so `$instance` does not narrow them. The rest read the raw series, rates over
Grafana's `$__rate_interval`, totals over the time range `$__range`. Every query is filtered by
`$cluster` and `$namespace` (the target's labels on a Prometheus shared by several clusters or
namespaces, where same-named topics must not be summed; All = `.*`, which also matches series
without the label), `$job` (the Prometheus jobs that scrape a sidecar), `$instance` (raw series
only), and the relay's series by `$topic` (the input topics; multi-value, All = `.*`). The
savings are the encoding relays' (`op="encode"`): a decoding relay's bytes go the other way.
The cost estimate takes its prices and the topics' retention from the dashboard's constants.
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
RECORDS = f"zdict_records_total{{{ENC}}}"

#: The recorded series' filter: per topic, the instance summed away by the rule.
PER_TOPIC = f"{CLUSTER}, {NAMESPACE}, {JOB}, {TOPIC}"
IN_RATE = f"namespace_job_topic:zdict_input_bytes:rate5m{{{PER_TOPIC}}}"
OUT_RATE = f"namespace_job_topic:zdict_output_bytes:rate5m{{{PER_TOPIC}}}"
RECORDS_RATE = f"namespace_job_topic_outcome:zdict_records:rate5m{{{PER_TOPIC}}}"
COMPRESSED_RATE = (
    f'namespace_job_topic_outcome:zdict_records:rate5m{{{PER_TOPIC}, outcome="compressed"}}'
)
STORED_RATE = f"namespace_job_topic:zdict_output_stored_bytes:rate5m{{{PER_TOPIC}}}"
STORED_RECORDS_RATE = f"namespace_job_topic:zdict_output_stored_records:rate5m{{{PER_TOPIC}}}"
BATCHES_RATE = f"namespace_job_topic:zdict_output_batches:rate5m{{{PER_TOPIC}}}"
CODEC_PER_RECORD = f"namespace_job_topic:zdict_codec_seconds_per_record:rate5m{{{PER_TOPIC}}}"
LATENCY_BUCKETS = f"namespace_job_topic_le:zdict_relay_latency_seconds_bucket:rate5m{{{PER_TOPIC}}}"


def sum_rate(metric: str, window: str = RATE, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}[{window}]))"


def total(recorded: str, by: str = "") -> str:
    """The sum of a recorded series (already a rate) over the selected topics."""
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} ({recorded})"


def quantile(q: float, recorded_buckets: str) -> str:
    """Quantile `q` of a histogram whose buckets' rates are recorded per topic and `le`."""
    return f"histogram_quantile({q}, sum by (le) ({recorded_buckets}))"


RATIO = f"{total(IN_RATE)} / {total(OUT_RATE)}"
SAVED_PER_SECOND = f"{total(IN_RATE)} - {total(OUT_RATE)}"
SAVED_IN_RANGE = f"sum(increase({IN}[$__range])) - sum(increase({OUT}[$__range]))"
SAVED_PER_MONTH = f"({sum_rate(IN, '1h')} - {sum_rate(OUT, '1h')}) * {MONTH_SECONDS}"
PASSED_THROUGH = f"1 - {total(COMPRESSED_RATE)} / {total(RECORDS_RATE)}"
#: What the broker stores for the output per record: batch and record framing, key, headers,
#: frame, after any batch compression.
STORED_PER_RECORD = f"{total(STORED_RATE)} / {total(STORED_RECORDS_RATE)}"
#: The same records with their raw values in place of the frames, against what is stored: the
#: framing both carry dilutes the value ratio. With batch compression on the output, the raw
#: estimate leaves it out: a lower bound.
STORED_RATIO = f"({total(STORED_RATE)} + {SAVED_PER_SECOND}) / {total(STORED_RATE)}"
#: Bytes saved per month (the last hour's rate), priced: the output topics hold
#: `$retention_days` of them on `$replicas` replicas at `$storage_price` per GB-month, and move
#: them `$transfers` times over priced links at `$transfer_price` per GB.
COST_SAVED_PER_MONTH = (
    f"({sum_rate(IN, '1h')} - {sum_rate(OUT, '1h')}) / {GB} * ("
    "$retention_days * 86400 * $replicas * $storage_price"
    f" + {MONTH_SECONDS} * $transfers * $transfer_price)"
)
