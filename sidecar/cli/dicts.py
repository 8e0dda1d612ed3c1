"""`train`, `evaluate` and `dicts list|show|activate|rollback|export|import|reindex`: making
dictionaries and choosing the active one, in the local store or the registry (their reports:
`sidecar.cli.training_reports`); a backup of the registry topic, its restore and its index
written anew. `dicts status|pin|unpin`: `sidecar.cli.dicts_status`; `dicts retire`:
`sidecar.cli.dicts_retire`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sidecar.cli import dicts_retire, dicts_status
from sidecar.cli.common import (
    PROG,
    InputLines,
    add_config_flags,
    configured_settings,
    note_sample,
    number,
    open_registry,
    read_lines,
    setting_number,
)
from sidecar.cli.training_reports import format_evaluation, format_training
from sidecar.codec import Decoder
from sidecar.config import Settings, TrainingSettings
from sidecar.dictionaries.backup import export_records, import_records, read_backup, write_backup
from sidecar.dictionaries.lifecycle import sync_store
from sidecar.dictionaries.model import (
    MAX_DICT_ID,
    MIN_DICT_ID,
    Dictionary,
    DictionaryMeta,
    validate_namespace,
)
from sidecar.dictionaries.registry import Registry, RegistryResolver, default_actor, pinned_error
from sidecar.dictionaries.retire_run import configured_namespace_topics, retire
from sidecar.dictionaries.store import DictionaryStore
from sidecar.errors import (
    ConfigError,
    DictionaryNotFound,
    StoreError,
    UnknownDictionary,
    ZdictError,
)
from sidecar.tools.evaluation import evaluate
from sidecar.tools.tables import render
from sidecar.training.choice import train
from sidecar.training.params import SKIPPED, Decision
from sidecar.training.promotion import promote
from sidecar.training.split import Unit, split_newest, usable

if TYPE_CHECKING:
    from sidecar.cli.common import Commands

#: Messages `train --input` and `evaluate` use at most: a uniform sample of a longer input.
DEFAULT_TRAIN_SAMPLE: Final = 20_000
DEFAULT_EVALUATE_SAMPLE: Final = 100_000

_DICT_HEADERS: Final = (
    "id",
    "namespace",
    "version",
    "bytes",
    "level",
    "held-out ratio",
    "break-even",
    "created (UTC)",
    "active",
)


#: A listed dictionary: its metadata, whether it is active, what is wrong with its files (None:
#: they load and match).
Listed = tuple[DictionaryMeta, bool, str | None]


def _dict_rows(listed: list[Listed]) -> list[list[object]]:
    return [
        [
            str(meta.id),
            meta.namespace,
            meta.version,
            meta.size,
            meta.level,
            meta.heldout_ratio,
            meta.break_even_size,
            meta.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            " ".join(["*"] * on + ["CORRUPT"] * (problem is not None)),
        ]
        for meta, on, problem in listed
    ]


def _print_dicts(listed: list[Listed], as_json: bool, where: str) -> None:
    if as_json:
        entries = [
            meta.model_dump(mode="json") | {"active": on, "problem": problem}
            for meta, on, problem in listed
        ]
        print(json.dumps(entries, indent=2))
    elif listed:
        print(render(_DICT_HEADERS, _dict_rows(listed)))
    else:
        print(f"no dictionaries in {where}")


def _list_store(store: DictionaryStore, namespace: str | None, as_json: bool) -> int:
    """`dicts list`: every dictionary of the store whose metadata reads, each file checked; what
    does not load is marked and named on stderr, with what to do (exit 1), the rest listed."""
    namespaces = [validate_namespace(namespace)] if namespace else store.namespaces()
    listed: list[Listed] = []
    warnings: list[str] = []
    for ns in namespaces:
        try:
            active = store.active_id(ns)
        except StoreError as exc:
            active = None
            warnings.append(str(exc))
        found, unreadable = store.checked(ns)
        warnings += [f"{exc}; the other dictionaries are listed" for exc in unreadable]
        for meta, problem in found:
            on = meta.id == active
            listed.append((meta, on, None if problem is None else str(problem)))
            if problem is not None:
                warnings.append(_corrupt_warning(meta, on, problem))
    _print_dicts(listed, as_json, str(store.root))
    for warning in warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    return 1 if warnings else 0


def _corrupt_warning(meta: DictionaryMeta, active: bool, problem: StoreError) -> str:
    ns = meta.namespace
    fix = (
        f"restore its files: remove {ns}/{meta.id}.zdict and {ns}/{meta.id}.json and a sidecar "
        "that follows the registry caches them again (or copy them from a backup)"
    )
    if active:
        return (
            f"{problem}; it is the ACTIVE dictionary of namespace {ns}, which no relay can load: "
            f"{fix}, or activate a sound one (zdict-sidecar dicts activate --namespace {ns} ID)"
        )
    return f"{problem}; {fix}"


# -- train and evaluate --------------------------------------------------------------------------


class SampleResolver:
    """Where `train --topic` finds the dictionaries that a topic's compressed records name: the
    local store, then the registry (`registry`, or opened on the first id the store lacks, when
    the registry is enabled). A topic of raw records never opens it."""

    def __init__(self, settings: Settings, store: DictionaryStore, registry: Registry | None):
        self.settings = settings
        self.store = store
        self._registry = registry
        self._opened: RegistryResolver | None = None

    def _from_registry(self) -> RegistryResolver | None:
        if self._opened is None and (self._registry is not None or self.settings.registry.enabled):
            registry = self._registry or open_registry(self.settings, "train")
            self._opened = RegistryResolver(registry, follow_interval=None)
        return self._opened

    def get(self, dict_id: int) -> Dictionary:
        try:
            return self.store.get(dict_id)
        except UnknownDictionary:
            resolver = self._from_registry()
            if resolver is None:
                raise UnknownDictionary(
                    f"unknown dictionary id {dict_id}: not in {self.store.describe()}, and the "
                    "registry is disabled (ZDICT_REGISTRY__ENABLED=false), where compressed "
                    "records' dictionaries are published"
                ) from None
            return resolver.get(dict_id)

    def describe(self) -> str:
        return f"{self.store.describe()}, then registry topic {self.settings.registry.topic}"

    def close(self) -> None:
        """Close a registry this resolver opened (one it was given stays open)."""
        if self._opened is not None and self._registry is None:
            self._opened.close()
        self._opened = None


def _training_overrides(args: argparse.Namespace) -> dict[str, Any]:
    training: dict[str, Any] = {}
    if args.budget_us is not None:
        training["budget_us_per_message"] = args.budget_us
    if args.budget_mb_per_s is not None:
        training["budget_mb_per_s"] = args.budget_mb_per_s
    if getattr(args, "heldout_fraction", None) is not None:
        training["heldout_fraction"] = args.heldout_fraction
    return {"training": training} if training else {}


def _input_lines(source: str, settings: Settings, max_lines: int) -> InputLines:
    """The messages of an input file, a sample of at most `max_lines` (`--sample`)."""
    lines = read_lines(
        source,
        max_lines=max_lines,
        max_line_bytes=settings.codec.max_output_size,
        line_cap="ZDICT_CODEC__MAX_OUTPUT_SIZE",
    )
    note_sample(lines, "--sample")
    return lines


def configured_topics(settings: Settings) -> list[str]:
    """The topics the configuration relays or proxies, each once, in order: what `train
    --configured-topics` trains. A decoding relay's input topics hold compressed records of
    other namespaces, so they are not its own."""
    relayed = settings.relay.input_topics if settings.relay.mode == "encode" else ()
    topics = list(dict.fromkeys((*relayed, *settings.proxy.topics)))
    if not topics:
        raise ConfigError(
            "train --configured-topics: the configuration names no topic to train: set "
            "ZDICT_RELAY__INPUT_TOPICS (with ZDICT_RELAY__MODE=encode) or ZDICT_PROXY__TOPICS"
        )
    return topics


def cmd_train(args: argparse.Namespace) -> int:
    if args.configured_topics:
        if args.namespace is not None:
            raise ConfigError(
                "--namespace names one namespace: with --configured-topics each topic trains "
                "its own"
            )
        return _train_configured(args)
    if args.namespace is None and args.topic is None:
        raise ConfigError("--namespace is required with --input (it is usually the topic name)")
    namespace = validate_namespace(args.namespace or args.topic)
    settings = configured_settings(args, **_training_overrides(args))
    store = DictionaryStore(settings.dictionaries)
    registry = open_registry(settings, "train") if args.publish else None
    try:
        code, entry = _train_namespace(args, settings, store, registry, namespace, args.topic)
    finally:
        if registry is not None:
            registry.close()
    # A pinned namespace's skipped run: stderr says so, and stdout stays empty.
    if args.json and entry["decision"] != SKIPPED:
        print(json.dumps(entry, indent=2))
    return code


def _train_configured(args: argparse.Namespace) -> int:
    """`train --configured-topics`: each configured topic in turn, its report printed (`--json`:
    one list at the end); a topic that fails is reported and the others still train. The exit
    code is the worst of the runs."""
    settings = configured_settings(args, **_training_overrides(args))
    topics = configured_topics(settings)
    store = DictionaryStore(settings.dictionaries)
    registry = open_registry(settings, "train") if args.publish else None
    entries: list[dict[str, Any]] = []
    worst = 0
    try:
        for topic in topics:
            try:
                if registry is not None:
                    # Its champion and pin as they are now, not as at the first topic's start.
                    registry.catch_up()
                code, entry = _train_namespace(
                    args, settings, store, registry, validate_namespace(topic), topic
                )
            except ZdictError as exc:
                code = 2 if isinstance(exc, ConfigError) else 1
                entry = {"namespace": topic, "decision": "error", "reason": str(exc)}
                print(f"{PROG}: topic {topic}: error: {exc}", file=sys.stderr)
            entries.append(entry)
            worst = max(worst, code)
        if registry is not None and settings.training.retire != "off":
            worst = max(worst, _retire_configured(settings, registry, store))
    finally:
        if registry is not None:
            registry.close()
    if args.json:
        print(json.dumps(entries, indent=2))
    return worst


def _retire_configured(settings: Settings, registry: Registry, store: DictionaryStore) -> int:
    """`ZDICT_TRAINING__RETIRE` after the configured topics trained: what can be retired, and
    with `apply` retired, said on stderr; 1 when it could not be judged."""
    apply = settings.training.retire == "apply"
    try:
        done = retire(
            settings,
            registry,
            configured_namespace_topics(settings),
            store=store if apply else None,
        )
    except ZdictError as exc:
        print(f"{PROG}: retirement (ZDICT_TRAINING__RETIRE): error: {exc}", file=sys.stderr)
        return 1
    going = sum(v.retire for v in done.verdicts)
    did = f"retired {len(done.retired)}" if apply else f"dry run: {going} could be retired"
    print(
        f"{PROG}: retirement (ZDICT_TRAINING__RETIRE={settings.training.retire}): {did} of "
        f"{len(done.verdicts)} dictionaries of registry topic {registry.topic}",
        file=sys.stderr,
    )
    return 0


def _train_namespace(
    args: argparse.Namespace,
    settings: Settings,
    store: DictionaryStore,
    registry: Registry | None,
    namespace: str,
    topic: str | None,
) -> tuple[int, dict[str, Any]]:
    """One training run of `namespace`, from `topic`'s latest records (None: from `--input`),
    against the registry's champion when `registry` is given; the text report printed unless
    `--json`. Returns the exit code and the run's entry (the skipped run's, when pinned)."""
    if registry is not None:
        sync_store(registry, store, [namespace])
        activation = registry.state.activations.get(namespace)
        if activation is not None and activation.pinned is not None:
            # The retraining CronJob runs this: a pin holds against it as against the
            # sidecars' own training. Not a failure: recorded, so the registry shows the
            # namespace looked after (ZdictTrainingOverdue stays quiet) and why.
            reason = str(pinned_error(namespace, activation.pinned))
            skipped: dict[str, Any] = {
                "trigger": "manual",
                "decision": SKIPPED,
                "reason": reason,
                "finished_at": time.time(),
            }
            store.record_training(namespace, skipped)
            registry.publish_training(namespace, skipped)
            print(f"{PROG}: {reason}", file=sys.stderr)
            return 0, {"namespace": namespace} | skipped
    champion = store.active(namespace)
    unit: Unit = "offset"
    if topic:
        from sidecar.training.topic_sample import read_sample

        # Producers that compress in-process leave no raw record on the topic: its
        # records are decoded first (decode, then train), with the dictionaries they name.
        resolver = SampleResolver(settings, store, registry)
        try:
            sample = read_sample(
                settings,
                topic,
                args.sample,
                decoder=Decoder(
                    resolver,
                    max_output_size=settings.codec.max_output_size,
                    header_key=settings.codec.header_key,
                ),
            )
        finally:
            resolver.close()
        entries, window = sample.entries, sample.window
        if sample.decoded:
            print(
                f"{sample.decoded:,} of the {len(sample.entries):,} sampled records were "
                "compressed on the topic: decoded to train on",
                file=sys.stderr,
            )
    else:
        lines = _input_lines(args.input, settings, args.sample)
        # A file's line order is its time order: line numbers (from 1) are its offsets.
        entries = [(0, n + 1, line) for n, line in zip(lines.numbers, lines.lines, strict=True)]
        window, unit = lines.describe(), "line"
    samples = split_newest(entries, settings.training.heldout_fraction, window, unit)
    params = settings.training.params(settings.codec)
    started = time.monotonic()
    report = train(samples, params, namespace=namespace, champion=champion)
    stored = None
    if report.decision is Decision.PROMOTED:
        stored = promote(
            store,
            registry,
            report,
            window=window,
            parent_id=champion.id if champion else None,
            activate=not args.no_activate,
        )
    summary = report.summary() | {
        "trigger": "manual",
        "finished_at": time.time(),
        "seconds": round(time.monotonic() - started, 3),
        "stored_id": stored.id if stored else None,
    }
    entry = report.to_dict() | summary
    store.record_training(namespace, entry)
    if registry is not None:
        registry.publish_training(namespace, summary)
    if not args.json:
        print(format_training(report, stored, stored is not None and not args.no_activate))
        if stored is not None and registry is not None:
            print(f"published to registry topic {registry.topic}")
    if report.decision is Decision.FAILED:
        print(f"{PROG}: training failed: {report.reason}", file=sys.stderr)
        return 1, entry
    return 0, entry


def cmd_evaluate(args: argparse.Namespace) -> int:
    settings = configured_settings(args, **_training_overrides(args))
    lines = _input_lines(args.file, settings, args.sample)
    numbered = [
        (0, n + 1, line) for n, line in zip(lines.numbers, lines.lines, strict=True) if usable(line)
    ]
    cut = round(len(numbered) * args.train_fraction)
    evaluation = evaluate(
        split_newest(
            numbered[:cut], settings.training.heldout_fraction, lines.describe(), unit="line"
        ),
        [line for _, _, line in numbered[cut:]],
        settings.training.params(settings.codec),
    )
    if args.json:
        print(json.dumps(evaluation.to_dict(), indent=2))
    else:
        print(format_evaluation(evaluation))
    if evaluation.training.decision is Decision.FAILED:
        print(f"{PROG}: evaluation failed: {evaluation.training.reason}", file=sys.stderr)
        return 1
    return 0


# -- dicts ---------------------------------------------------------------------------------------


def cmd_dicts(args: argparse.Namespace) -> int:
    settings = configured_settings(args)
    if args.action in ("export", "import", "reindex"):
        return _backup(args, settings)
    if args.action == "status":
        return dicts_status.cmd_status(args, settings)
    if args.action in ("pin", "unpin"):
        return dicts_status.cmd_pin(args, settings)
    if args.action == "retire":
        return dicts_retire.cmd_retire(args, settings)
    store = DictionaryStore(settings.dictionaries)
    if args.registry:
        registry = open_registry(settings, "operator")
        try:
            return _dicts_in_registry(args, registry, store)
        finally:
            registry.close()
    if args.action == "list":
        return _list_store(store, args.namespace, args.json)
    if args.action == "show":
        print(store.get(args.id).meta.model_dump_json(indent=2))
        return 0
    namespace = validate_namespace(args.namespace)
    if args.action == "activate":
        dictionary = store.activate(namespace, args.id)
    else:
        dictionary = store.rollback(namespace)
    print(
        f"namespace {namespace}: dictionary {dictionary.id} "
        f"(version {dictionary.meta.version}) is active in {store.root}"
    )
    if settings.registry.enabled:
        print(
            f"{PROG}: note: only this store changed; a sidecar that follows the registry topic "
            f"({settings.registry.topic}) goes back to the registry's choice within seconds - "
            "add --registry to switch every sidecar",
            file=sys.stderr,
        )
    return 0


def _backup(args: argparse.Namespace, settings: Settings) -> int:
    """`dicts export FILE` / `dicts import FILE`: the registry topic to a file and back;
    `dicts reindex`: its index written anew."""
    if not settings.registry.enabled:
        raise ConfigError(
            f"dicts {args.action} works on the registry topic, which is disabled "
            "(ZDICT_REGISTRY__ENABLED=false): enable it"
        )
    topic = settings.registry.topic
    if args.action == "export":
        records = export_records(settings)
        write_backup(args.file, topic, records)
        print(f"exported {len(records)} records of registry topic {topic} to {args.file}")
        return 0
    if args.action == "reindex":
        return _reindex(settings, "")
    exported_from, records = read_backup(args.file)
    count = import_records(settings, records)
    return _reindex(settings, f"imported {count} records (exported from {exported_from}) into ")


def _reindex(settings: Settings, done: str) -> int:
    """The registry read back whole as every sidecar will (each record checked), and its index
    written anew: after a restore the index still describes the registry topic that was lost."""
    registry = Registry(settings, actor=default_actor("operator"))
    try:
        registry.ensure_topic()
        registry.load(whole=True)
        written = registry.reindex()
        state = registry.state
        print(
            f"{done}registry topic {registry.topic}: {len(state.dictionaries)} dictionaries, "
            f"{len(state.activations)} active; index {registry.index.topic} rewritten "
            f"({written} records)"
        )
    finally:
        registry.close()
    return 0


def _dicts_in_registry(args: argparse.Namespace, registry: Registry, store: DictionaryStore) -> int:
    """`dicts ... --registry`: the registry's view; activations are published to every host."""
    state = registry.state
    if args.action == "list":
        namespace = validate_namespace(args.namespace) if args.namespace else None
        # The registry holds only dictionaries that passed every check (`RegistryState`).
        listed: list[Listed] = [
            (
                meta,
                state.activations.get(meta.namespace) is not None
                and state.activations[meta.namespace].dict_id == meta.id,
                None,
            )
            for meta in state.versions(namespace)
        ]
        _print_dicts(listed, args.json, f"registry topic {registry.topic}")
        return 0
    if args.action == "show":
        meta = state.dictionaries.meta(args.id)
        if meta is None:
            raise DictionaryNotFound(
                f"dictionary {args.id} is not in registry topic {registry.topic}"
            )
        print(meta.model_dump_json(indent=2))
        return 0
    namespace = validate_namespace(args.namespace)
    if args.action == "activate":
        activation = registry.publish_activation(namespace, args.id, "activate")
    else:
        activation = registry.rollback(namespace)
    sync_store(registry, store, [namespace])
    version = next(m.version for m in state.versions(namespace) if m.id == activation.dict_id)
    print(
        f"namespace {namespace}: dictionary {activation.dict_id} (version {version}) "
        f"is active, published to registry topic {registry.topic} for every sidecar"
    )
    return 0


# -- parsers -------------------------------------------------------------------------------------


def add_train(commands: Commands) -> None:
    p = commands.add_parser(
        "train", help="train a dictionary from messages, store it, activate if better"
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", metavar="FILE", help="one message per line; - for stdin")
    source.add_argument("--topic", metavar="TOPIC", help="sample the latest records of a topic")
    source.add_argument(
        "--configured-topics",
        action="store_true",
        help="each topic of the configuration in turn (ZDICT_RELAY__INPUT_TOPICS, "
        "ZDICT_PROXY__TOPICS), as --topic does; exit code: the worst of the runs",
    )
    p.add_argument(
        "--sample",
        type=number(int, ge=1),
        default=DEFAULT_TRAIN_SAMPLE,
        metavar="N",
        help="messages to train on: the latest records of --topic, a uniform sample of the "
        f"lines of --input (default {DEFAULT_TRAIN_SAMPLE})",
    )
    p.add_argument("--namespace", help="default: the --topic name (required with --input)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON (--configured-topics: a list, one entry per topic; "
        'decision "error" where a topic failed)',
    )
    p.add_argument(
        "--heldout-fraction",
        type=setting_number(TrainingSettings, "heldout_fraction"),
        metavar="F",
        help="the newest share of the sample held out to measure the candidates "
        "(ZDICT_TRAINING__HELDOUT_FRACTION; 0.2)",
    )
    add_budget_flags(p)
    p.add_argument(
        "--no-activate", action="store_true", help="store a winner without activating it"
    )
    p.add_argument(
        "--publish",
        action="store_true",
        help="against the registry: its champion, and a winner published to every sidecar",
    )
    add_config_flags(p)
    p.set_defaults(func=cmd_train)


def add_budget_flags(parser: argparse.ArgumentParser) -> None:
    """The CPU budget of the chosen dictionary and level (0 and 0: no budget)."""
    parser.add_argument(
        "--budget-us",
        type=setting_number(TrainingSettings, "budget_us_per_message"),
        metavar="US",
        help="CPU µs one message may take to encode, plus its bytes at --budget-mb-per-s",
    )
    parser.add_argument(
        "--budget-mb-per-s",
        type=setting_number(TrainingSettings, "budget_mb_per_s"),
        metavar="MB_S",
        help="per-byte part of the budget",
    )


def add_evaluate(commands: Commands) -> None:
    p = commands.add_parser("evaluate", help="what would I save on my data? (nothing is stored)")
    p.add_argument("file", metavar="FILE", help="one message per line; - for stdin")
    p.add_argument(
        "--train-fraction",
        type=number(float, gt=0, lt=1),
        default=0.2,
        metavar="F",
        help="the first F of the lines are all the choice sees (its newest share held out, as "
        "train does), the rest are measured (default 0.2)",
    )
    p.add_argument(
        "--sample",
        type=number(int, ge=1),
        default=DEFAULT_EVALUATE_SAMPLE,
        metavar="N",
        help=f"a uniform sample of N lines of a longer input (default {DEFAULT_EVALUATE_SAMPLE})",
    )
    p.add_argument("--json", action="store_true")
    add_budget_flags(p)
    add_config_flags(p, store=False)
    p.set_defaults(func=cmd_evaluate)


def _add_dicts_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--registry",
        action="store_true",
        help="the registry topic (every sidecar follows it) instead of the local store",
    )
    add_config_flags(parser)


def add_dicts(commands: Commands) -> None:
    p = commands.add_parser(
        "dicts",
        help="list, show, activate, roll back or pin dictionaries, each topic's status; back up "
        "the registry",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = actions.add_parser("list", help="every dictionary, * marks the active one")
    a.add_argument("--namespace")
    a.add_argument("--json", action="store_true")
    _add_dicts_flags(a)
    dict_id = number(int, ge=MIN_DICT_ID, le=MAX_DICT_ID)
    a = actions.add_parser("show", help="metadata of one dictionary")
    a.add_argument("id", type=dict_id)
    _add_dicts_flags(a)
    a = actions.add_parser("activate", help="make a stored dictionary the active one")
    a.add_argument("--namespace", required=True)
    a.add_argument("id", type=dict_id)
    _add_dicts_flags(a)
    a = actions.add_parser("rollback", help="re-activate the previously active dictionary")
    a.add_argument("--namespace", required=True)
    _add_dicts_flags(a)
    dicts_status.add_actions(actions)
    dicts_retire.add_action(actions)
    a = actions.add_parser(
        "export", help="every record of the registry topic, in order, to FILE (a backup)"
    )
    a.add_argument("file", type=Path, metavar="FILE")
    add_config_flags(a)
    a = actions.add_parser(
        "import", help="restore a backup FILE into the registry topic (created, and empty)"
    )
    a.add_argument("file", type=Path, metavar="FILE")
    add_config_flags(a)
    a = actions.add_parser(
        "reindex", help="write the registry's index topic anew from the registry (after a restore)"
    )
    add_config_flags(a)
    p.set_defaults(func=cmd_dicts)
