"""The `kafka`, `consumer` and `producer` sections: librdkafka properties, verbatim."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from sidecar.errors import ConfigError

# Parts of librdkafka property names whose values are secrets: kept as SecretStr, never logged
# or printed. From librdkafka's CONFIGURATION.md: sasl.password, ssl.key.password,
# ssl.keystore.password, ssl.key.pem, sasl.oauthbearer.config (may carry a client secret or a
# token), sasl.oauthbearer.client.secret (and its alias ...client.credentials.client.secret),
# sasl.oauthbearer.assertion.private.key.passphrase and .pem; a sasl.jaas.config some tools
# pass; every other PEM too (certificates are public, but one string is easier to audit).
_SECRET_PROPERTY_MARKERS = (
    "password",
    "passphrase",
    "secret",
    "token",
    "jaas",
    "private",
    "credentials",
    "oauthbearer.config",
)


def is_secret_property(name: str) -> bool:
    """True for librdkafka properties holding credentials (sasl.password, ssl.key.password,
    sasl.oauthbearer.config, any `*.pem`...)."""
    name = name.lower()
    return name.endswith(".pem") or any(marker in name for marker in _SECRET_PROPERTY_MARKERS)


class KafkaSettings(BaseModel):
    """librdkafka client properties, passed through verbatim by their librdkafka names.

    In TOML: a `[kafka]` table with quoted keys (`"sasl.password" = "..."`). In the environment:
    `ZDICT_KAFKA__SASL_PASSWORD` - the part after `KAFKA__`, lower-cased, with `_` read as `.`
    (librdkafka names use dots, never underscores). `bootstrap.servers` falls back to the
    `KAFKA_BOOTSTRAP_SERVERS` variable that Kafka tooling commonly sets.
    """

    model_config = ConfigDict(frozen=True)

    properties: dict[str, str | SecretStr] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect(cls, data: Any) -> Any:
        if isinstance(data, dict) and "properties" not in data:
            data = {"properties": data}
        if not isinstance(data, dict) or not isinstance(data.get("properties"), dict):
            return data
        normalised: dict[str, str | SecretStr] = {}
        for key, value in data["properties"].items():
            name = str(key).lower().replace("_", ".")
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif not isinstance(value, str | int | float | SecretStr):
                raise ValueError(f"librdkafka property {name} must be a string or number")
            if isinstance(value, SecretStr):
                normalised[name] = value
            elif is_secret_property(name):
                normalised[name] = SecretStr(str(value))
            else:
                normalised[name] = str(value)
        return {"properties": normalised}

    def as_librdkafka_dict(self) -> dict[str, str]:
        """The properties as confluent-kafka takes them, secrets revealed (only for the client)."""
        return {
            k: v.get_secret_value() if isinstance(v, SecretStr) else v
            for k, v in self.properties.items()
        }

    def redacted(self) -> dict[str, str]:
        """The properties for logs: secrets as `***`."""
        return {k: "***" if isinstance(v, SecretStr) else v for k, v in self.properties.items()}

    def client_config(self, *layers: KafkaSettings) -> dict[str, str]:
        """These properties with `layers` (e.g. consumer-only ones) on top, ready for a client.

        `bootstrap.servers` falls back to $KAFKA_BOOTSTRAP_SERVERS.

        Raises:
            ConfigError: neither names a broker. There is no default: a guessed address made
                every command wait out its timeout before saying nothing was configured.
        """
        merged = self.as_librdkafka_dict()
        for layer in layers:
            merged.update(layer.as_librdkafka_dict())
        bootstrap = merged.get("bootstrap.servers") or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap or not bootstrap.strip():
            raise ConfigError(
                "no Kafka broker configured: set KAFKA_BOOTSTRAP_SERVERS (or "
                "ZDICT_KAFKA__BOOTSTRAP_SERVERS) to HOST:PORT[,HOST:PORT...]"
            )
        merged["bootstrap.servers"] = bootstrap
        return merged
