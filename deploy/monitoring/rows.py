"""The dashboard's panels, one function per row (or part of a row), top to bottom."""

from __future__ import annotations

from collections.abc import Callable

from deploy.monitoring.queries import (
    IN,
    JOB,
    MESSAGES,
    NS,
    OUT,
    PASSED_THROUGH,
    RATE,
    RATIO,
    SAVED_IN_RANGE,
    SAVED_PER_MONTH,
    SAVED_PER_SECOND,
    quantile,
    sum_rate,
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


def panels() -> list[Json]:
    """Every panel of the dashboard, laid out and numbered."""
    layout = Layout()
    for row in ROWS:
        row(layout)
    return layout.numbered()


def _savings_at_a_glance(layout: Layout) -> None:
    """The headline numbers: ratio, bytes saved, pass-through share, dictionary."""
    layout.row("Savings at a glance")
    ratio_colours = colour_steps((None, "red"), (1.1, "orange"), (1.5, "green"))
    for panel in (
        stat(
            "Compression ratio",
            "Raw value bytes in / bytes out (compressed frames with their zd header, and values "
            "passed through), over the selected namespaces. 1.00 saves nothing.",
            [(RATIO, "ratio")],
            "none",
            decimals=2,
            thresholds=ratio_colours,
        ),
        stat(
            "Bytes saved per second",
            "Input bytes per second minus output bytes per second.",
            [(SAVED_PER_SECOND, "saved")],
            "binBps",
        ),
        stat(
            "Saved in the time range",
            "Bytes in minus bytes out over the dashboard's time range (restarts handled).",
            [(SAVED_IN_RANGE, "saved")],
            "bytes",
            instant=True,
        ),
        stat(
            "Estimated saving per month",
            "Bytes saved per second over the last hour, times 30 days: what the output topics "
            "and everything downstream (replicas, network, sinks) stop storing or moving.",
            [(SAVED_PER_MONTH, "per month")],
            "bytes",
            instant=True,
        ),
        stat(
            "Records passed through",
            "Share of records left uncompressed (tombstones, below the break-even size, "
            "precompressed, no gain, already encoded). The reasons are in Records below.",
            [(PASSED_THROUGH, "passed through")],
            "percentunit",
            decimals=1,
        ),
        stat(
            "Active dictionary",
            "The dictionary each namespace is compressed with (dict_id 0: none yet).",
            [
                (
                    f"max by (namespace, dict_id, version) (zdict_dictionary_info{{{NS}}})",
                    "{{namespace}}: {{dict_id}} v{{version}}",
                )
            ],
            "none",
            text_mode="name",
            instant=True,
        ),
    ):
        layout.add(panel, 4, 5)


def _compression(layout: Layout) -> None:
    """Live ratio against the held-out ratio; bytes in, out and saved."""
    layout.row("Compression")
    layout.add(
        timeseries(
            "Compression ratio: live vs held-out",
            "Live ratio per namespace next to the held-out ratio the active dictionary reached "
            "when it was trained. A live ratio well below its held-out ratio means drift: "
            "retrain (alert ZdictCompressionRatioDropped).",
            [
                (
                    f"{sum_rate(IN, by='namespace')} / {sum_rate(OUT, by='namespace')}",
                    "{{namespace}} live",
                ),
                (
                    f"max by (namespace) (zdict_dictionary_heldout_ratio{{{NS}}})",
                    "{{namespace}} held-out",
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
                (sum_rate(IN, by="namespace"), "{{namespace}} in"),
                (sum_rate(OUT, by="namespace"), "{{namespace}} out"),
                (
                    f"{sum_rate(IN, by='namespace')} - {sum_rate(OUT, by='namespace')}",
                    "{{namespace}} saved",
                ),
            ],
            "binBps",
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
            "below_threshold, precompressed, no_gain (README, wire format).",
            [(sum_rate(MESSAGES, by="outcome"), "{{outcome}}")],
            "short",
            stack=True,
        ),
        12,
        8,
    )
    layout.add(
        bargauge(
            "Passed through, by reason (share of all records in the time range)",
            "Records passed through unchanged, by reason, as a share of every record relayed.",
            [
                (
                    f"sum by (outcome) (increase(zdict_messages_total{{{NS}, "
                    f'outcome!="compressed"}}[$__range])) '
                    f"/ scalar(sum(increase({MESSAGES}[$__range])))",
                    "{{outcome}}",
                )
            ],
            "percentunit",
        ),
        12,
        8,
    )


def _latency(layout: Layout) -> None:
    """Encode time per message and relay latency, p50 and p99."""
    layout.row("Latency")
    layout.add(
        timeseries(
            "Compress time per message (p50, p99)",
            "Encode time per message, observed as each consumed batch's mean.",
            [
                (quantile(0.5, "zdict_compress_seconds"), "p50"),
                (quantile(0.99, "zdict_compress_seconds"), "p99"),
            ],
            "s",
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "Relay latency: record timestamp to acknowledged (p50, p99)",
            "From the input record's timestamp to the broker's acknowledgement of its "
            "compressed copy (one record in 8). Includes the producer's own delay and any lag.",
            [
                (quantile(0.5, "zdict_relay_latency_seconds"), "p50"),
                (quantile(0.99, "zdict_relay_latency_seconds"), "p99"),
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
                    f"max by (namespace, dict_id, version) (zdict_dictionary_info{{{NS}}})",
                    "{{namespace}} {{dict_id}} v{{version}}",
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
                    f"time() - max by (namespace) "
                    f"(zdict_dictionary_created_timestamp_seconds{{{NS}}})",
                    "{{namespace}}",
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
                    f"sum by (result) (increase(zdict_training_runs_total{{{NS}}}[$__range]))",
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
            "Training runs per namespace and result.",
            [
                (
                    f"sum by (namespace, result) "
                    f"(increase(zdict_training_runs_total{{{NS}}}[{RATE}]))",
                    "{{namespace}} {{result}}",
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
                    f"sum(increase(zdict_training_seconds_sum{{{NS}}}[$__range])) "
                    f"/ sum(increase(zdict_training_seconds_count{{{NS}}}[$__range]))",
                    "mean",
                )
            ],
            "s",
            instant=True,
            mappings=[NO_RUN],
        ),
        12,
        8,
    )


def _training_in_the_sidecar(layout: Layout) -> None:
    """The trainer role, drift, triggers, reservoirs, the training's CPU and its publications."""
    layout.row("Training in the sidecar")
    _trainer_and_drift(layout)
    _triggers_and_reservoir(layout)
    _training_cpu_and_publications(layout)


def _trainer_and_drift(layout: Layout) -> None:
    """Who trains each namespace, and the live ratio drift is judged by."""
    layout.add(
        state_timeline(
            "Trainer of each namespace",
            "The instance that trains each namespace: the holder of partition 0 of its input "
            "topic. Exactly one per namespace; the role moves with the partition.",
            [
                (
                    f"max by (namespace, instance) (zdict_trainer{{{NS}}} == 1)",
                    "{{namespace}} on {{instance}}",
                )
            ],
            state="trainer",
        ),
        16,
        8,
    )
    layout.add(
        stat(
            "Trainers per namespace",
            "Instances that train each namespace: 1 is right; 0 (nobody trains it) or 2 and "
            "more for 15 minutes is alert ZdictTrainerNotUnique.",
            [(f"sum by (namespace) (zdict_trainer{{{NS}}})", "{{namespace}}")],
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
                    f"max by (namespace) (zdict_live_ratio{{{NS}}} "
                    f"and on (instance, namespace) (zdict_trainer{{{NS}}} == 1))",
                    "{{namespace}} live",
                ),
                (
                    f"max by (namespace) (zdict_dictionary_heldout_ratio{{{NS}}})",
                    "{{namespace}} held-out",
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
                    f"sum by (namespace, trigger) "
                    f"(increase(zdict_training_triggers_total{{{NS}}}[{RATE}]))",
                    "{{namespace}} {{trigger}}",
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
                    f"sum by (trigger) (increase(zdict_training_triggers_total{{{NS}}}[$__range]))",
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
            "Bytes each instance's reservoir of recent values holds per namespace (values "
            "plus bookkeeping; at most ZDICT_SAMPLING__MAX_BYTES). The trainer trains on its own.",
            [
                (
                    f"max by (namespace, instance) (zdict_sample_bytes{{{NS}}})",
                    "{{namespace}} {{instance}}",
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
                    f"max by (namespace, instance) (zdict_sample_messages{{{NS}}})",
                    "{{namespace}} {{instance}}",
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
    training_cpu = sum_rate(f"zdict_training_cpu_seconds_total{{{JOB}}}", "1h", by="instance")
    layout.add(
        timeseries(
            "Training CPU share (last hour)",
            "CPU seconds of the training processes over CPU seconds of the relay and the "
            "training processes, per instance, over the preceding hour (a run's CPU time is "
            "counted when it ends).",
            [
                (
                    f"{training_cpu} / ("
                    f"{sum_rate(f'process_cpu_seconds_total{{{JOB}}}', '1h', by='instance')}"
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
                    f"sum by (result) (increase(zdict_registry_publish_total{{{JOB}}}[{RATE}]))",
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
    """Consumer lag, commits, dead letters, transactions and produce errors."""
    layout.row("Kafka")
    layout.add(
        timeseries(
            "Consumer lag per partition",
            "Records between the sidecar's position and the end of each input partition "
            "(from librdkafka's statistics, every 5 s; alert ZdictConsumerLagGrowing).",
            [
                (
                    'sum by (topic, partition) (zdict_consumer_lag_messages{topic=~"$namespace"})',
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
            [(sum_rate(f"zdict_commits_total{{{JOB}}}", by="result"), "{{result}}")],
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
                    "sum by (namespace, stage) (increase(zdict_dead_letters_total"
                    f'{{{JOB}, namespace=~"$namespace"}}[{RATE}]))',
                    "{{namespace}} {{stage}}",
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
            [(sum_rate(f"zdict_transactions_total{{{JOB}}}", by="result"), "{{result}}")],
            "short",
        ),
        6,
        8,
    )
    layout.add(
        timeseries(
            "Produce errors",
            "Records the producer failed to deliver, per instance and reason. The relay stops "
            "on the first one and is restarted (alert ZdictProduceErrors): no data is good.",
            [
                (
                    f"sum by (instance, reason) (zdict_produce_errors_total{{{JOB}}})",
                    "{{instance}} {{reason}}",
                )
            ],
            "short",
        ),
        6,
        8,
    )


def _instances(layout: Layout) -> None:
    """Instances up, versions, restarts, partitions, memory and CPU."""
    layout.row("Instances")
    layout.add(
        stat(
            "Instances up",
            "Sidecar instances Prometheus scrapes successfully, of all it scrapes.",
            [(f"sum(up{{{JOB}}})", "up"), (f"count(up{{{JOB}}})", "scraped")],
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
                    f"count by (version, librdkafka, libzstd) (zdict_build_info{{{JOB}}})",
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
                    f"sum(changes(process_start_time_seconds{{{JOB}}}[$__range]))",
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
            "Input partitions held by the consumer group's members.",
            [(f"sum(zdict_assigned_partitions{{{JOB}}})", "partitions")],
            "none",
        ),
        8,
        6,
    )
    layout.add(
        timeseries(
            "Resident memory per instance",
            "Resident set size of each sidecar process.",
            [(f"max by (instance) (process_resident_memory_bytes{{{JOB}}})", "{{instance}}")],
            "bytes",
            minimum=0,
        ),
        12,
        8,
    )
    layout.add(
        timeseries(
            "CPU per instance",
            "CPU seconds per second (1 = one core busy).",
            [(sum_rate(f"process_cpu_seconds_total{{{JOB}}}", by="instance"), "{{instance}}")],
            "none",
            minimum=0,
        ),
        12,
        8,
    )


#: The rows, top to bottom.
ROWS: tuple[Callable[[Layout], None], ...] = (
    _savings_at_a_glance,
    _compression,
    _records,
    _latency,
    _dictionaries_and_training,
    _training_in_the_sidecar,
    _kafka,
    _instances,
)
