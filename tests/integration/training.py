"""Dictionaries trained for a test with the real CLI (`zdict-sidecar train`)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


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
