"""The dashboard's operating rows: Kafka (lag, commits, dead letters, transactions,
errors) and the instances."""

from __future__ import annotations

from deploy.monitoring.queries import ON, RATE, SEL, sum_rate
from deploy.monitoring.widgets import Layout, stat, timeseries


def kafka(layout: Layout) -> None:
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


def instances(layout: Layout) -> None:
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
