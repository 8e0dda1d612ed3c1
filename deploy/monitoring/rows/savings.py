"""The dashboard's first rows: savings at a glance, then stored bytes per topic."""

from __future__ import annotations

from deploy.monitoring.queries import (
    BATCHES_RATE,
    COST_SAVED_PER_MONTH,
    COST_SAVED_PER_TOPIC,
    ON,
    PASSED_THROUGH,
    RATIO,
    RELAY_NET_HELD,
    RELAY_STORED,
    RELAY_WITHOUT,
    SAVED_IN_RANGE,
    SAVED_PER_MONTH,
    SAVED_PER_SECOND,
    SAVED_RATE,
    SAVED_SHARE,
    SEL,
    STORED_PER_RECORD,
    STORED_RATE,
    STORED_RATIO,
    STORED_RECORDS_RATE,
    WITHOUT_RATE,
    sum_rate,
    total,
)
from deploy.monitoring.widgets import (
    Layout,
    bargauge,
    colour_steps,
    stat,
    state_timeline,
    timeseries,
)

#: The labels a per-partition series is summed by.
_TP = "topic, partition"


def savings_at_a_glance(layout: Layout) -> None:
    """The headline numbers: saved against the producer's own codec (bytes, share, per month,
    cost), the value ratio, pass-through share, batch fill, dictionary."""
    layout.row("Savings at a glance")
    ratio_colours = colour_steps((None, "red"), (1.0, "orange"), (1.1, "green"))
    for panel in (
        stat(
            "Saved against the producer's codec",
            "Share of the bytes the producer's own batches (its codec, the same fill) would "
            "have stored that the broker does not store: record batches as stored, framing, "
            "keys and headers included, for the relays, proxies and in-process producers of the "
            "selected topics. 0% where a topic is written raw (output mode): batches fill "
            "there, and the producer's codec is left to do what it does best. Negative: the "
            "sidecar stores more.",
            [(SAVED_SHARE, "saved")],
            "percentunit",
            decimals=1,
            thresholds=colour_steps((None, "red"), (0.0, "orange"), (0.05, "green")),
        ),
        stat(
            "Stored: producer's own / sidecar",
            "What the producer's own batches would store against what the broker stores for "
            "the sidecar's batches (1.00: the same, as in raw mode).",
            [(STORED_RATIO, "as stored")],
            "none",
            decimals=2,
            thresholds=ratio_colours,
        ),
        stat(
            "Bytes saved per second",
            "Bytes the producer's own batches would store per second, minus what the broker "
            "stores (zdict_stored_without_sidecar_bytes_total - zdict_stored_bytes_total).",
            [(SAVED_PER_SECOND, "saved")],
            "binBps",
        ),
        stat(
            "Saved in the time range",
            "The same over the dashboard's time range (restarts handled).",
            [(SAVED_IN_RANGE, "saved")],
            "bytes",
            instant=True,
        ),
        stat(
            "Estimated saving per month",
            "Bytes saved per second over the last hour, times 30 days: what the topics and "
            "everything downstream (replicas, network, sinks) stop storing or moving. A relay "
            "keeps its input topic too: Relay input below.",
            [(SAVED_PER_MONTH, "per month")],
            "bytes",
            instant=True,
        ),
        stat(
            "Estimated cost saved per month",
            "The last hour's bytes saved, priced: held for $retention_days days on "
            "$replicas replicas at $storage_price per GB-month, and moved $transfers times "
            "(replication across zones, consumers) at $transfer_price per GB over 30 days. "
            "Set the prices and retention in the dashboard's variables; per topic below.",
            [(COST_SAVED_PER_MONTH, "per month")],
            "currencyUSD",
            decimals=2,
            instant=True,
        ),
    ):
        layout.add(panel, 4, 5)
    for panel, width in (
        (
            stat(
                "Value compression ratio",
                "Raw value bytes in / value bytes out (frames with their zd header, values "
                "passed through or written raw) of the encoding relays and proxies: values "
                "only, before framing and the batch codec; the saving above is what is stored.",
                [(RATIO, "ratio")],
                "none",
                decimals=2,
            ),
            4,
        ),
        (
            stat(
                "Stored per record",
                "Bytes the broker stores per record written: its share of the record batch, "
                "framing and key and headers included.",
                [(STORED_PER_RECORD, "stored")],
                "bytes",
                decimals=1,
            ),
            4,
        ),
        (
            stat(
                "Records passed through",
                "Share of records left uncompressed (tombstones, below the break-even size, "
                "precompressed, no gain, already encoded, and raw: written as they came where "
                "batches fill past the crossover). The reasons are in Records below.",
                [(PASSED_THROUGH, "passed through")],
                "percentunit",
                decimals=1,
            ),
            4,
        ),
        (
            stat(
                "Records per batch",
                "Records in each record batch written: where batches fill, the producer's "
                "codec alone does well and the sidecar writes raw (README, when to use it).",
                [(f"{total(STORED_RECORDS_RATE)} / {total(BATCHES_RATE)}", "records per batch")],
                "none",
                decimals=1,
            ),
            4,
        ),
        (
            stat(
                "Active dictionary",
                "The dictionary each topic is compressed with (dict_id 0: none yet).",
                [
                    (
                        f"max by (topic, dict_id, version) (zdict_dictionary_info{{{SEL}}})",
                        "{{topic}}: {{dict_id}} v{{version}}",
                    )
                ],
                "none",
                text_mode="name",
                instant=True,
            ),
            8,
        ),
    ):
        layout.add(panel, width, 5)


def stored_per_topic(layout: Layout) -> None:
    """Per topic: stored bytes against the producer's own, the saving (/s, %, cost), the
    output mode per partition, records per batch; the relay's input topic beside its output."""
    layout.row("Stored bytes per topic")
    layout.add(
        timeseries(
            "Stored bytes per second: sidecar vs producer's own",
            "Per topic: what the broker stores for the sidecar's batches, and what the "
            "producer's own batches (its codec, the same fill) would have stored: counted by "
            "the proxy, estimated from a sample by relays and in-process producers.",
            [
                (total(STORED_RATE, by="topic"), "{{topic}} stored"),
                (total(WITHOUT_RATE, by="topic"), "{{topic}} producer's own"),
            ],
            "binBps",
            minimum=0,
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Saved against the producer's codec",
            "Per topic, the share of the producer's own stored bytes the sidecar saves (0: raw "
            "mode, or nothing gained; negative: it stores more).",
            [
                (
                    f"{total(SAVED_RATE, by='topic')} / {total(WITHOUT_RATE, by='topic')}",
                    "{{topic}}",
                )
            ],
            "percentunit",
        ),
        12,
        8,
    )
    layout.add(
        state_timeline(
            "Output mode per partition",
            "Where a partition (-1: a topic written by key, or left to the partitioner) is "
            "written raw: its batches fill past the dictionary's crossover, so values go as "
            "they came and the producer's codec compresses them (output_mode_changed in the "
            "logs says why). Blank: frames. Relay output topics and in-process producers; "
            "the proxy decides per batch: raw while most of a partition's batches went raw "
            "(zdict_proxy_output_batches_total).",
            [
                (
                    f'max by (topic, partition) (zdict_output_mode{{{ON}, mode="raw"}}'
                    f' or zdict_producer_output_mode{{{ON}, mode="raw"}} or round('
                    + sum_rate(f'zdict_proxy_output_batches_total{{{ON}, mode="raw"}}', by=_TP)
                    + " / "
                    + sum_rate(f"zdict_proxy_output_batches_total{{{ON}}}", by=_TP)
                    + "))",
                    "{{topic}}[{{partition}}]",
                ),
            ],
            state="raw",
        ),
        12,
        8,
    )
    layout.add(
        bargauge(
            "Cost saved per month, per topic",
            "The last hour's saving of each topic, priced as in Estimated cost saved per month.",
            [(COST_SAVED_PER_TOPIC, "{{topic}}")],
            "currencyUSD",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Relay input: kept beside its output",
            "A relay writes its output next to an input topic it does not delete: the input "
            "stores what the producer's own batches store (the relay's estimate), for as long "
            "as the input's retention. Keep it short (deploy/README.md, Relay input "
            "retention).",
            [
                (sum_rate(RELAY_WITHOUT, by="topic"), "{{topic}} input (estimated)"),
                (sum_rate(RELAY_STORED, by="topic"), "{{topic}} output"),
            ],
            "binBps",
            minimum=0,
        ),
        12,
        8,
    )
    layout.add(
        bargauge(
            "Relay: bytes held less than the input alone",
            "Per relayed topic, on disk: the output's saving held $retention_days days minus "
            "the input kept $input_retention_days days, on $replicas replicas (negative: the "
            "input's retention costs more than the output saves).",
            [(RELAY_NET_HELD, "{{topic}}")],
            "bytes",
        ),
        12,
        8,
    )
