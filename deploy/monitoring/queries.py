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
value bytes are the encoding side's (`op="encode"`): a decoding relay's bytes go the other way.
Savings are stored bytes (`zdict_stored_*`): the relay's, the proxy's and the in-process
producer's, against the producer's own codec. The cost estimate takes its prices and the
topics' retention from the dashboard's constants.
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

RECORDS = f"zdict_records_total{{{ENC}}}"

#: The recorded series' filter: per topic, the instance summed away by the rule.
PER_TOPIC = f"{CLUSTER}, {NAMESPACE}, {JOB}, {TOPIC}"
IN_RATE = f"namespace_job_topic:zdict_input_bytes:rate5m{{{PER_TOPIC}}}"
OUT_RATE = f"namespace_job_topic:zdict_output_bytes:rate5m{{{PER_TOPIC}}}"
RECORDS_RATE = f"namespace_job_topic_outcome:zdict_records:rate5m{{{PER_TOPIC}}}"
COMPRESSED_RATE = (
    f'namespace_job_topic_outcome:zdict_records:rate5m{{{PER_TOPIC}, outcome="compressed"}}'
)
STORED_RATE = f"namespace_job_topic:zdict_stored_bytes:rate5m{{{PER_TOPIC}}}"
WITHOUT_RATE = f"namespace_job_topic:zdict_stored_without_sidecar_bytes:rate5m{{{PER_TOPIC}}}"
SAVED_RATE = f"namespace_job_topic:zdict_stored_saved_bytes:rate5m{{{PER_TOPIC}}}"
STORED_RECORDS_RATE = f"namespace_job_topic:zdict_stored_records:rate5m{{{PER_TOPIC}}}"
BATCHES_RATE = f"namespace_job_topic:zdict_stored_batches:rate5m{{{PER_TOPIC}}}"
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
PASSED_THROUGH = f"1 - {total(COMPRESSED_RATE)} / {total(RECORDS_RATE)}"
#: The raw series of what is stored, and of what the producer's own batches would have stored.
STORED = f"zdict_stored_bytes_total{{{SEL}}}"
WITHOUT = f"zdict_stored_without_sidecar_bytes_total{{{SEL}}}"
#: Saved against the producer's own codec (zdict_stored_*: the relay, the proxy and the
#: in-process producer alike): what the same records would have stored without the sidecar,
#: minus what the broker stores. Negative where the sidecar stores more.
SAVED_PER_SECOND = total(SAVED_RATE)
SAVED_SHARE = f"{total(SAVED_RATE)} / {total(WITHOUT_RATE)}"
SAVED_IN_RANGE = f"sum(increase({WITHOUT}[$__range])) - sum(increase({STORED}[$__range]))"
SAVED_PER_MONTH = f"({sum_rate(WITHOUT, '1h')} - {sum_rate(STORED, '1h')}) * {MONTH_SECONDS}"
#: What the broker stores per record: batch and record framing, key, headers, value, after
#: the batch codec.
STORED_PER_RECORD = f"{total(STORED_RATE)} / {total(STORED_RECORDS_RATE)}"
#: What the producer's own batches would store, against what is stored (1.00: the same).
STORED_RATIO = f"{total(WITHOUT_RATE)} / {total(STORED_RATE)}"


def cost_per_month(saved_per_second: str) -> str:
    """Bytes saved per second, priced per month: the output topics hold `$retention_days` of
    them on `$replicas` replicas at `$storage_price` per GB-month, and move them `$transfers`
    times over priced links at `$transfer_price` per GB."""
    return (
        f"({saved_per_second}) / {GB} * ("
        "$retention_days * 86400 * $replicas * $storage_price"
        f" + {MONTH_SECONDS} * $transfers * $transfer_price)"
    )


#: The last hour's saving, priced (`cost_per_month`).
COST_SAVED_PER_MONTH = cost_per_month(f"{sum_rate(WITHOUT, '1h')} - {sum_rate(STORED, '1h')}")
#: The same per topic.
COST_SAVED_PER_TOPIC = cost_per_month(
    f"{sum_rate(WITHOUT, '1h', 'topic')} - {sum_rate(STORED, '1h', 'topic')}"
)
#: A relay keeps its input topic: the producer's own batches, which its estimate of the
#: counterfactual stands for (path="relay"), held `$input_retention_days` on `$replicas`.
RELAY_WITHOUT = f'zdict_stored_without_sidecar_bytes_total{{{SEL}, path="relay"}}'
RELAY_STORED = f'zdict_stored_bytes_total{{{SEL}, path="relay"}}'
#: Bytes a relay's topics hold on disk less than the input alone would: the output's saving
#: over `$retention_days`, minus the input kept for `$input_retention_days` (negative: the
#: input's retention costs more than the output saves; deploy/README.md, "Relay input
#: retention", has the arithmetic).
RELAY_NET_HELD = (
    f"({sum_rate(RELAY_WITHOUT, '1h', 'topic')} - {sum_rate(RELAY_STORED, '1h', 'topic')})"
    " * $retention_days * 86400 * $replicas"
    f" - {sum_rate(RELAY_WITHOUT, '1h', 'topic')} * $input_retention_days * 86400 * $replicas"
)
