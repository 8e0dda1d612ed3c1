"""One typed settings tree for the whole process, validated at start.

Sources, highest priority first: command-line flags, environment variables (`ZDICT_` prefix,
`__` between levels: `ZDICT_CODEC__LEVEL=1`), a TOML config file (`--config FILE`), defaults.
An invalid value stops the process with a `ConfigError` naming the setting (as its environment
variable) and the expected form. `sections` holds the tree's sections, `settings` its root, the
loader and the environment's help text.
"""

from sidecar.config.sections import (
    ENV_DELIMITER,
    ENV_PREFIX,
    MAX_CONFIG_BYTES,
    LogFormat,
    LogLevel,
)
from sidecar.config.sections.codec import CodecSettings
from sidecar.config.sections.kafka import KafkaSettings, is_secret_property
from sidecar.config.sections.metrics import MetricsSettings
from sidecar.config.sections.proxy import ProxySettings
from sidecar.config.sections.registry import RegistrySettings
from sidecar.config.sections.relay import (
    DEFAULT_DECODED_TOPIC,
    Guarantee,
    RelayMode,
    RelaySettings,
)
from sidecar.config.sections.sampling import SamplingSettings
from sidecar.config.sections.training import TrainingSettings
from sidecar.config.settings import (
    Settings,
    environment_help,
    environment_variables,
    load_settings,
)

__all__ = [
    "DEFAULT_DECODED_TOPIC",
    "ENV_DELIMITER",
    "ENV_PREFIX",
    "MAX_CONFIG_BYTES",
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
    "Settings",
    "TrainingSettings",
    "environment_help",
    "environment_variables",
    "is_secret_property",
    "load_settings",
]
