"""The dashboard's panels, one function per row (or part of a row), top to bottom."""

from __future__ import annotations

from collections.abc import Callable

from deploy.monitoring.queries import (
    BATCHES_RATE,
    CODEC_PER_RECORD,
    COST_SAVED_PER_MONTH,
    COST_SAVED_PER_TOPIC,
    ENC,
    IN_RATE,
    LATENCY_BUCKETS,
    ON,
    OUT_RATE,
    PASSED_THROUGH,
    RATE,
    RATIO,
    RECORDS,
    RECORDS_RATE,
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
    quantile,
    sum_rate,
    total,
)
from deploy.monitoring.widgets import (
    NO_RUN,
    Json,
    Layout,
    bargauge,
    colour_steps,
    stat,
    state_timeline,
    timeseries,
)

#: The labels a per-partition series is summed by.
_TP = "topic, partition"


def panels() -> list[Json]:
    """Every panel of the dashboard, laid out and numbered."""
    layout = Layout()
    for row in ROWS:
        row(layout)
    return layout.numbered()


def _savings_at_a_glance(layout: Layout) -> None:
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


def _stored_per_topic(layout: Layout) -> None:
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


def _compression(layout: Layout) -> None:
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


def _records(layout: Layout) -> None:
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


def _latency(layout: Layout) -> None:
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


def _dictionaries_and_training(layout: Layout) -> None:
    """The active dictionary over time, its age, and the training runs."""
    layout.row("Dictionaries and training")
    layout.add(
        state_timeline(
            "Active dictionary over time",
            "One lane per dictionary, filled while it is the active one; activations are "
            "annotated on every graph (toggle 'Dictionary activated' at the top).",
            [
                (
                    f"max by (topic, dict_id, version) (zdict_dictionary_info{{{SEL}}})",
                    "{{topic}} {{dict_id}} v{{version}}",
                )
            ],
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Dictionary age",
            "Time since the active dictionary was trained (alert ZdictDictionaryStale).",
            [
                (
                    f"time() - max by (topic) "
                    f"(zdict_dictionary_created_timestamp_seconds{{{SEL}}})",
                    "{{topic}}",
                )
            ],
            "s",
        ),
        6,
        8,
    )
    layout.add(
        bargauge(
            "Training runs in the time range",
            "Runs by result: promoted (a new dictionary), rejected (the champion stays), "
            "failed (alert ZdictTrainingFailing).",
            [
                (
                    f"sum by (result) (increase(zdict_training_runs_total{{{SEL}}}[$__range]))",
                    "{{result}}",
                )
            ],
            "short",
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Training runs by result",
            "Training runs per topic and result, in the sidecars.",
            [
                (
                    f"sum by (topic, result) "
                    f"(increase(zdict_training_runs_total{{{SEL}}}[{RATE}]))",
                    "{{topic}} {{result}}",
                )
            ],
            "short",
            bars=True,
        ),
        12,
        8,
    )
    layout.add(
        stat(
            "Training time per run (mean over the time range)",
            "Wall time of one training run, sampling excluded.",
            [
                (
                    f"sum(increase(zdict_training_duration_seconds_sum{{{SEL}}}[$__range])) "
                    f"/ sum(increase(zdict_training_duration_seconds_count{{{SEL}}}[$__range]))",
                    "mean",
                )
            ],
            "s",
            instant=True,
            mappings=[NO_RUN],
        ),
        6,
        8,
    )
    layout.add(
        stat(
            "Latest training run (registry)",
            "When each topic's latest training run recorded in the registry ended, whoever ran "
            "it: `manual` is `zdict-sidecar train` (the retraining CronJob), the others the "
            "sidecars' own runs (alerts ZdictLastTrainingFailed, ZdictTrainingOverdue).",
            [
                (
                    "max by (topic, trigger, result) "
                    f"(zdict_last_training_timestamp_seconds{{{SEL}}}) * 1000",
                    "{{topic}}: {{trigger}}, {{result}}",
                )
            ],
            "dateTimeFromNow",
            text_mode="value_and_name",
            instant=True,
        ),
        6,
        8,
    )


def _training_in_the_sidecar(layout: Layout) -> None:
    """The trainer role, drift, triggers, reservoirs, the training's CPU and its publications."""
    layout.row("Training in the sidecar")
    _trainer_and_drift(layout)
    _triggers_and_reservoir(layout)
    _training_cpu_and_publications(layout)


def _trainer_and_drift(layout: Layout) -> None:
    """Who trains each topic, and the live ratio drift is judged by."""
    layout.add(
        state_timeline(
            "Trainer of each topic",
            "The instance that trains each topic: the holder of its partition 0. Exactly one "
            "per topic; the role moves with the partition.",
            [
                (
                    f"max by (topic, instance) (zdict_trainer{{{SEL}}} == 1)",
                    "{{topic}} on {{instance}}",
                )
            ],
            state="trainer",
        ),
        16,
        8,
    )
    layout.add(
        stat(
            "Trainers per topic",
            "Instances that train each topic: 1 is right; 0 (nobody trains it) or 2 and "
            "more for 15 minutes is alert ZdictTrainerNotUnique.",
            [(f"sum by (topic) (zdict_trainer{{{SEL}}})", "{{topic}}")],
            "none",
            decimals=0,
            thresholds=colour_steps((None, "red"), (1, "green"), (2, "red")),
            text_mode="value_and_name",
            instant=True,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Drift: the trainer's live ratio vs the held-out ratio",
            "The live ratio the trainer judges drift by (over ZDICT_TRAINING__DRIFT_WINDOW, "
            "values no dictionary could shrink left out; none until a full window) next to "
            "the active dictionary's held-out ratio. Drift retrains once the live ratio is "
            "ZDICT_TRAINING__DRIFT_TOLERANCE below it (the 'Drift' annotation).",
            [
                (
                    f"max by (topic) (zdict_live_compression_factor{{{SEL}}} "
                    f"and on (instance, topic) (zdict_trainer{{{SEL}}} == 1))",
                    "{{topic}} live",
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


def _triggers_and_reservoir(layout: Layout) -> None:
    """What started training runs, and what the reservoirs hold."""
    layout.add(
        timeseries(
            "Training triggers by kind",
            "Training runs started: first (the reservoir filled for the first time), "
            "scheduled (ZDICT_TRAINING__RETRAIN_INTERVAL), drift (the live ratio fell).",
            [
                (
                    f"sum by (topic, trigger) "
                    f"(increase(zdict_training_triggers_total{{{SEL}}}[{RATE}]))",
                    "{{topic}} {{trigger}}",
                )
            ],
            "short",
            bars=True,
        ),
        8,
        8,
    )
    layout.add(
        bargauge(
            "Triggers in the time range",
            "Training runs started in the time range, by trigger.",
            [
                (
                    "sum by (trigger) "
                    f"(increase(zdict_training_triggers_total{{{SEL}}}[$__range]))",
                    "{{trigger}}",
                )
            ],
            "short",
        ),
        4,
        8,
    )
    layout.add(
        timeseries(
            "Training reservoir: bytes",
            "Bytes each instance's reservoir of recent values holds per topic (values "
            "plus bookkeeping; at most ZDICT_SAMPLING__MAX_BYTES). The trainer trains on its own.",
            [
                (
                    f"max by (topic, instance) (zdict_sample_bytes{{{SEL}}})",
                    "{{topic}} {{instance}}",
                )
            ],
            "bytes",
            minimum=0,
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Training reservoir: values",
            "Values each reservoir holds; the first training waits for "
            "ZDICT_SAMPLING__MIN_MESSAGES.",
            [
                (
                    f"max by (topic, instance) (zdict_sample_records{{{SEL}}})",
                    "{{topic}} {{instance}}",
                )
            ],
            "short",
            minimum=0,
        ),
        6,
        8,
    )


def _training_cpu_and_publications(layout: Layout) -> None:
    """The training's share of CPU, and publications to the registry topic."""
    training_cpu = sum_rate(f"zdict_training_cpu_seconds_total{{{ON}}}", "1h", by="instance")
    layout.add(
        timeseries(
            "Training CPU share (last hour)",
            "CPU seconds of the training processes over CPU seconds of the relay and the "
            "training processes, per instance, over the preceding hour (a run's CPU time is "
            "counted when it ends).",
            [
                (
                    f"{training_cpu} / ("
                    f"{sum_rate(f'process_cpu_seconds_total{{{ON}}}', '1h', by='instance')}"
                    f" + {training_cpu})",
                    "{{instance}}",
                )
            ],
            "percentunit",
            minimum=0,
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Registry publications by result",
            "Dictionaries and activations published to the registry topic, ok or failed "
            "(a failed one leaves the champion active; alert ZdictRegistryPublishFailing).",
            [
                (
                    "sum by (result) "
                    f"(increase(zdict_registry_publications_total{{{ON}}}[{RATE}]))",
                    "{{result}}",
                )
            ],
            "short",
            bars=True,
        ),
        6,
        8,
    )


def _kafka(layout: Layout) -> None:
    """Consumer lag, commits, dead letters, transactions, produce errors, and the registry
    records ignored."""
    layout.row("Kafka")
    layout.add(
        timeseries(
            "Consumer lag per partition",
            "Records between the sidecar's position and the end of each input partition "
            "(from librdkafka's statistics, every 5 s; alert ZdictConsumerLagGrowing).",
            [
                (
                    f"sum by (topic, partition) (zdict_consumer_lag_records{{{SEL}}})",
                    "{{topic}} [{{partition}}]",
                )
            ],
            "short",
            minimum=0,
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Offset commits per second",
            "Consumer offset commits by result; a failed commit is retried with newer offsets.",
            [(sum_rate(f"zdict_commits_total{{{ON}}}", by="result"), "{{result}}")],
            "short",
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Dead letters by stage",
            "Records set aside to the dead-letter topic because they could not be encoded, "
            "decoded or produced (too large for the output topic); 0 without a dead-letter "
            "topic, where the relay stops instead (alert ZdictDeadLetters).",
            [
                (
                    f"sum by (topic, stage) (increase(zdict_dead_letters_total{{{SEL}}}[{RATE}]))",
                    "{{topic}} {{stage}}",
                )
            ],
            "short",
            bars=True,
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Transactions (exactly-once mode)",
            "Transactions committed and aborted per second; an abort rewinds to the last commit "
            "and reads the records again (0 in at-least-once mode).",
            [(sum_rate(f"zdict_transactions_total{{{ON}}}", by="result"), "{{result}}")],
            "short",
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Produce errors per second",
            "Records the producer failed to deliver per second, per instance and reason. "
            "A relay without a dead-letter topic exits right after its first, often before a "
            "scrape: ZdictSidecarExitedWithError reads that exit from the cluster. Without a "
            "dead-letter topic the relay stops at the first and is restarted (alert "
            "ZdictProduceErrors); with one, a record the broker refuses outright is set aside "
            "and the relay goes on (alert ZdictDeadLetters). No data is good.",
            [
                (
                    sum_rate(f"zdict_produce_errors_total{{{ON}}}", by="instance, reason"),
                    "{{instance}} {{reason}}",
                )
            ],
            "short",
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Registry records ignored",
            "Records of the registry topic this instance skipped since it started, by class of "
            "reason: written outside zdict-sidecar, or by a newer version. Readers go on without "
            "them; each is named (offset, key, reason) by a registry_record_ignored log line "
            "(alert ZdictRegistryRecordsIgnored). 0 is good.",
            [
                (
                    f"sum by (instance, reason) (zdict_registry_records_ignored_total{{{ON}}})",
                    "{{instance}} {{reason}}",
                )
            ],
            "short",
        ),
        12,
        8,
    )


def _instances(layout: Layout) -> None:
    """Instances up, versions, restarts, partitions, memory and CPU."""
    layout.row("Instances")
    layout.add(
        stat(
            "Instances up",
            "Sidecar instances Prometheus scrapes successfully, of all it scrapes.",
            [(f"sum(up{{{ON}}})", "up"), (f"count(up{{{ON}}})", "scraped")],
            "none",
            text_mode="value_and_name",
        ),
        4,
        6,
    )
    layout.add(
        stat(
            "Versions",
            "Instances per zdict-sidecar version and native library versions.",
            [
                (
                    f"count by (version, librdkafka, libzstd) (zdict_build_info{{{ON}}})",
                    "{{version}} (librdkafka {{librdkafka}}, libzstd {{libzstd}})",
                )
            ],
            "none",
            text_mode="value_and_name",
            instant=True,
        ),
        8,
        6,
    )
    layout.add(
        stat(
            "Restarts in the time range",
            "Process starts per instance (alert ZdictSidecarRestarting).",
            [
                (
                    f"sum(changes(process_start_time_seconds{{{ON}}}[$__range]))",
                    "restarts",
                )
            ],
            "none",
            instant=True,
        ),
        4,
        6,
    )
    layout.add(
        stat(
            "Assigned partitions",
            "Input partitions held by each consumer group's members. A sidecar holding none is "
            "still ready (more pods than partitions); none held anywhere in a group for 5 "
            "minutes is alert ZdictNoPartitionAssigned.",
            [(f"sum by (group) (zdict_assigned_partitions{{{ON}}})", "{{group}}")],
            "none",
        ),
        8,
        6,
    )
    layout.add(
        timeseries(
            "Memory per instance",
            "Resident set size of each relay process, and the working set of its container "
            "(cgroup: the relay and its training processes, as the OOM killer counts it).",
            [
                (
                    f"max by (instance) (process_resident_memory_bytes{{{ON}}})",
                    "{{instance}} relay RSS",
                ),
                (
                    f"max by (instance) (zdict_memory_working_set_bytes{{{ON}}})",
                    "{{instance}} container working set",
                ),
            ],
            "bytes",
            minimum=0,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "Memory: share of the container's limit",
            "Working set over the memory limit of each sidecar's container; 0 without a limit "
            "(alert ZdictMemoryNearLimit above 90%).",
            [
                (
                    f"max by (instance) (zdict_memory_working_set_bytes{{{ON}}} "
                    f"/ zdict_memory_limit_bytes{{{ON}}})",
                    "{{instance}}",
                )
            ],
            "percentunit",
            minimum=0,
        ),
        8,
        8,
    )
    layout.add(
        timeseries(
            "CPU per instance",
            "CPU seconds per second (1 = one core busy).",
            [(sum_rate(f"process_cpu_seconds_total{{{ON}}}", by="instance"), "{{instance}}")],
            "none",
            minimum=0,
        ),
        8,
        8,
    )


#: The rows, top to bottom.
ROWS: tuple[Callable[[Layout], None], ...] = (
    _savings_at_a_glance,
    _stored_per_topic,
    _compression,
    _records,
    _latency,
    _dictionaries_and_training,
    _training_in_the_sidecar,
    _kafka,
    _instances,
)
