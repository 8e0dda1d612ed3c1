"""The dashboard's training rows: dictionaries and training runs, and training in the
sidecar (trainer, drift, triggers, reservoirs, CPU, publications)."""

from __future__ import annotations

from deploy.monitoring.queries import ON, RATE, SEL, sum_rate
from deploy.monitoring.widgets import (
    NO_RUN,
    Layout,
    bargauge,
    colour_steps,
    stat,
    state_timeline,
    timeseries,
)


def dictionaries_and_training(layout: Layout) -> None:
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


def training_in_the_sidecar(layout: Layout) -> None:
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
