"""What the serde's clients take from the application's confluent-kafka configuration."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

#: librdkafka properties that say how to reach and authenticate to the cluster: the registry
#: reader is given these from the application's producer or consumer configuration (and
#: nothing producer- or consumer-only, which a consumer of the registry would warn about).
CONNECTION_PROPERTIES: Final = (
    "bootstrap.servers",
    "metadata.broker.list",
    "security.protocol",
    "sasl.",
    "ssl.",
    "enable.ssl.certificate.verification",
    "client.id",
    "client.rack",
    "client.dns.lookup",
    "broker.address.family",
    "socket.",
)
#: confluent-kafka's builder properties: they build serializers through a private API.
_BUILDERS: Final = ("key.serializer.builder", "value.serializer.builder")
_DESERIALIZER_BUILDERS: Final = ("key.deserializer.builder", "value.deserializer.builder")

Serde = Callable[[Any, Any], Any]


def registry_properties(conf: Mapping[str, Any]) -> dict[str, str]:
    """The connection properties of a client configuration, for the registry's reader.

    Callables (an `oauth_cb`, an `error_cb`) cannot be handed on: give such applications'
    producers a `FollowingEncoder` (or consumers a `Decoder`) built with what they need.
    """
    found: dict[str, str] = {}
    for key, value in conf.items():
        wanted = any(
            key == name or (name.endswith(".") and key.startswith(name))
            for name in CONNECTION_PROPERTIES
        )
        if not wanted or not isinstance(value, str | int | float):
            continue
        # librdkafka spells booleans true/false; bool is an int, so it comes first.
        found[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return found


def take_serdes(
    conf: dict[str, Any], key_name: str, value_name: str
) -> tuple[Serde | None, Serde | None]:
    """Pop the application's key and value (de)serializers from `conf` (confluent-kafka's
    `key.serializer` / `value.serializer` properties, or their deserializer twins).

    Raises:
        ValueError: a `*.builder` property, which only confluent-kafka's own classes build.
    """
    builders = [name for name in (*_BUILDERS, *_DESERIALIZER_BUILDERS) if name in conf]
    if builders:
        raise ValueError(
            f"{', '.join(builders)}: build the (de)serializer yourself and pass it as "
            f"{key_name} / {value_name}; zdict's clients do not run confluent-kafka's builders"
        )
    key, value = conf.pop(key_name, None), conf.pop(value_name, None)
    for name, serde in ((key_name, key), (value_name, value)):
        if serde is not None and not callable(serde):
            raise ValueError(f"{name} must be callable(obj, SerializationContext), not {serde!r}")
    return key, value
