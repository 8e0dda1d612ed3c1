"""One typed settings tree for the whole process, validated at start.

Sources, highest priority first: command-line flags, environment variables (`ZDICT_` prefix,
`__` between levels: `ZDICT_CODEC__LEVEL=1`), a TOML config file (`--config FILE`), defaults.
An invalid value stops the process with a `ConfigError` naming the setting (as its environment
variable) and the expected form. `sections` holds the tree's sections, `settings` its root, the
loader and the environment's help text.
"""

from sidecar.config.sections import (
    DEFAULT_DECODED_TOPIC,
    ENV_DELIMITER,
    ENV_PREFIX,
    MAX_CONFIG_BYTES,
    CodecSettings,
    Guarantee,
    KafkaSettings,
    LogFormat,
    LogLevel,
    MetricsSettings,
    ProxySettings,
    RegistrySettings,
    RelayMode,
    RelaySettings,
    SamplingSettings,
    TrainingSettings,
    is_secret_property,
)
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
