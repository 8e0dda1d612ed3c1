"""The dashboard's codec rows: compression, records by outcome, latency."""

from __future__ import annotations

from deploy.monitoring.queries import (
    BATCHES_RATE,
    CODEC_PER_RECORD,
    ENC,
    IN_RATE,
    LATENCY_BUCKETS,
    OUT_RATE,
    RECORDS,
    RECORDS_RATE,
    SEL,
    STORED_RATE,
    STORED_RECORDS_RATE,
    quantile,
    total,
)
from deploy.monitoring.widgets import Layout, bargauge, timeseries


def compression(layout: Layout) -> None:
    """Value ratio against the held-out ratio; bytes in, out and saved; bytes per record as
    values and as stored; batch fill."""
    layout.row("Compression")
    layout.add(
        timeseries(
            "Compression ratio: values vs held-out",
            "Value ratio per topic (pass-through values included) next to the held-out ratio "
            "the active dictionary reached when it was trained (passed-through values left "
            "out). Drift is judged on the trainer's live ratio: Training in the sidecar below "
            "(alert ZdictCompressionRatioDropped).",
            [
                (
                    f"{total(IN_RATE, by='topic')} / {total(OUT_RATE, by='topic')}",
                    "{{topic}} values",
                ),
                (
                    f"max by (topic) (zdict_dictionary_heldout_compression_factor{{{SEL}}})",
                    "{{topic}} held-out",
                ),
            ],
            "none",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Bytes per second: in, out, saved",
            "Raw bytes consumed, bytes produced (header included) and their difference.",
            [
                (total(IN_RATE, by="topic"), "{{topic}} in"),
                (total(OUT_RATE, by="topic"), "{{topic}} out"),
                (
                    f"{total(IN_RATE, by='topic')} - {total(OUT_RATE, by='topic')}",
                    "{{topic}} values in - out",
                ),
            ],
            "binBps",
            minimum=0,
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Bytes per record: raw value, value out, as stored",
            "Per record of each topic: the raw value consumed, the value produced (frame and zd "
            "header), and what the broker stores for the output record (its share of the record "
            "batch: framing, key, headers, value, after batch compression).",
            [
                (
                    f"{total(IN_RATE, by='topic')} / {total(RECORDS_RATE, by='topic')}",
                    "{{topic}} raw",
                ),
                (
                    f"{total(OUT_RATE, by='topic')} / {total(RECORDS_RATE, by='topic')}",
                    "{{topic}} value out",
                ),
                (
                    f"{total(STORED_RATE, by='topic')} / {total(STORED_RECORDS_RATE, by='topic')}",
                    "{{topic}} stored",
                ),
            ],
            "bytes",
            minimum=0,
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Records per batch",
            "Records per record batch written, per topic (the relay's and in-process "
            "producer's librdkafka batch statistics, every 5 s; the proxy's clients' batches).",
            [
                (
                    f"{total(STORED_RECORDS_RATE, by='topic')} / {total(BATCHES_RATE, by='topic')}",
                    "{{topic}}",
                )
            ],
            "none",
            minimum=0,
        ),
        12,
        8,
    )


def records(layout: Layout) -> None:
    """Records by outcome, and why records passed through."""
    layout.row("Records")
    layout.add(
        timeseries(
            "Records per second by outcome",
            "compressed, or passed through because of: tombstone, already_encoded, "
            "below_threshold, precompressed, no_gain (README, wire format); raw: written as "
            "they came for the batch compression (output mode).",
            [(total(RECORDS_RATE, by="outcome"), "{{outcome}}")],
            "short",
            stack=True,
        ),
        12,
        8,
    )
    layout.add(
        bargauge(
            "Passed through, by reason (share of all records in the time range)",
            "Records passed through unchanged, by reason, as a share of every record the "
            "encoding relays handled.",
            [
                (
                    f"sum by (outcome) (increase(zdict_records_total{{{ENC}, "
                    f'outcome!="compressed"}}[$__range])) '
                    f"/ scalar(sum(increase({RECORDS}[$__range])))",
                    "{{outcome}}",
                )
            ],
            "percentunit",
        ),
        12,
        8,
    )


def latency(layout: Layout) -> None:
    """The codec's time per record and relay latency, p50 and p99."""
    layout.row("Latency")
    layout.add(
        timeseries(
            "Encode time per record, by topic",
            "Seconds the encoding relays' codec spends per record: the consumed batches' "
            "encode time over the records in them, a mean per record over 5 minutes "
            "(zdict_codec_batch_duration_seconds, zdict_codec_records_total; alert "
            "ZdictRelayLatencyHigh watches the relay latency's p99).",
            [(total(CODEC_PER_RECORD, by="topic"), "{{topic}}")],
            "s",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Relay latency: record timestamp to acknowledged (p50, p99)",
            "From the input record's timestamp to the broker's acknowledgement of its "
            "compressed copy (the oldest record of each delivery report). Includes the "
            "producer's own delay and any lag.",
            [
                (quantile(0.5, LATENCY_BUCKETS), "p50"),
                (quantile(0.99, LATENCY_BUCKETS), "p99"),
            ],
            "s",
        ),
        12,
        8,
    )
