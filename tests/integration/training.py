"""Dictionaries trained for a test: with the real CLI (`zdict-sidecar train`), or in process and
published in a registry topic."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sidecar.dictionaries.model import Dictionary


def train_dictionary(
    store: Path,
    namespace: str,
    events: Sequence[bytes],
    work_dir: Path,
    extra_args: Sequence[str] = (),
) -> tuple[int, Path]:
    """Train with ``zdict-sidecar train [extra_args]``; the active dictionary's id and file."""
    from sidecar.dictionaries.store import DictionaryStore

    sample = work_dir / f"train-{namespace}.ndjson"
    sample.write_bytes(b"".join(event + b"\n" for event in events))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sidecar",
            "train",
            "--input",
            str(sample),
            "--namespace",
            namespace,
            "--dictionaries",
            str(store),
            *extra_args,
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    dictionary = DictionaryStore(store).active(namespace)
    assert dictionary is not None, "training stored no active dictionary"
    path = store / namespace / f"{dictionary.id}.zdict"
    assert path.is_file()
    return dictionary.id, path


def publish_dictionary(
    bootstrap: str, registry_topic: str, namespace: str, events: Sequence[bytes]
) -> Dictionary:
    """A dictionary of `namespace` trained on `events` (8 KiB, level 3), published in
    `registry_topic` and active there, as a trainer promotes one."""
    from sidecar.config import KafkaSettings, RegistrySettings, Settings
    from sidecar.dictionaries.registry import Registry
    from sidecar.dictionaries.store import DictionaryStore
    from sidecar.training.choice import train
    from sidecar.training.params import TrainingParams
    from sidecar.training.promotion import promote
    from sidecar.training.split import split_ordered

    settings = Settings(
        kafka=KafkaSettings.model_validate({"bootstrap.servers": bootstrap}),
        registry=RegistrySettings(topic=registry_topic),
    )
    registry = Registry.open(settings, "test")
    try:
        report = train(
            split_ordered(list(events), 0.8),
            TrainingParams(dict_sizes=(8192,), levels=(3,)),
            namespace=namespace,
            champion=None,
        )
        with tempfile.TemporaryDirectory() as store:
            return promote(DictionaryStore(store), registry, report, window="test", parent_id=None)
    finally:
        registry.close()
