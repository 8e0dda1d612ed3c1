"""The sections of the settings tree, one module each: codec, training, sampling, registry,
Kafka clients, relay, proxy, metrics (`settings.Settings` is their root)."""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

from sidecar.config.sections.codec import CodecSettings
from sidecar.config.sections.kafka import KafkaSettings, is_secret_property
from sidecar.config.sections.metrics import MetricsSettings
from sidecar.config.sections.proxy import REMOVED_SETTINGS, ProxySettings
from sidecar.config.sections.registry import RegistrySettings
from sidecar.config.sections.relay import (
    DEFAULT_DECODED_TOPIC,
    Guarantee,
    RelayMode,
    RelaySettings,
)
from sidecar.config.sections.sampling import SamplingSettings
from sidecar.config.sections.training import TrainingSettings

ENV_PREFIX = "ZDICT_"
ENV_DELIMITER = "__"
#: Bytes a `--config` file may have: a settings file is a few KiB.
MAX_CONFIG_BYTES: Final = 1024 * 1024

#: `log_format`: `auto` is console on a terminal, JSON lines otherwise.
LogFormat: TypeAlias = Literal["auto", "json", "console"]
LogLevel: TypeAlias = Literal["debug", "info", "warning", "error"]

__all__ = [
    "DEFAULT_DECODED_TOPIC",
    "ENV_DELIMITER",
    "ENV_PREFIX",
    "MAX_CONFIG_BYTES",
    "REMOVED_SETTINGS",
    "CodecSettings",
    "Guarantee",
    "KafkaSettings",
    "LogFormat",
    "LogLevel",
    "MetricsSettings",
    "ProxySettings",
    "RegistrySettings",
    "RelayMode",
    "RelaySettings",
    "SamplingSettings",
    "TrainingSettings",
    "is_secret_property",
]
