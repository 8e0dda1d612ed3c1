"""`run --help` lists every setting's environment variable, generated from the settings model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from sidecar.cli.main import main
from sidecar.config import ENV_DELIMITER, ENV_PREFIX, KafkaSettings, Settings


def _leaves(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str | None]]:
    """(environment variable, description) of every leaf setting, Kafka sections excluded."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if annotation is KafkaSettings:
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaves(annotation, f"{prefix}{name.upper()}{ENV_DELIMITER}")
        else:
            yield f"{prefix}{name.upper()}", info.description


def _run_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_every_leaf_setting_appears_in_run_help(capsys: pytest.CaptureFixture[str]) -> None:
    listed = {line.split()[0] for line in _run_help(capsys).splitlines() if line.startswith("  ")}
    leaves = {name for name, _ in _leaves(Settings, ENV_PREFIX)}
    assert len(leaves) > 50
    assert leaves - listed == set()


def test_run_help_lists_the_variables_that_are_not_settings_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _run_help(capsys)
    for name in (
        "ZDICT_KAFKA__<PROPERTY>",
        "ZDICT_CONSUMER__<PROPERTY>",
        "ZDICT_PRODUCER__<PROPERTY>",
        "KAFKA_BOOTSTRAP_SERVERS",
    ):
        assert f"\n  {name} " in text


def test_every_setting_has_a_description() -> None:
    missing = [name for name, description in _leaves(Settings, ENV_PREFIX) if not description]
    sections = [name for name, info in Settings.model_fields.items() if not info.description]
    assert missing == [] and sections == []
