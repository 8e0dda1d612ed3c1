"""How the proxy secures its upstream connections, read from the librdkafka
properties of `ZDICT_KAFKA__*` (the relay's own settings), checked once at start.

`security.protocol` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL. TLS: one `ssl.SSLContext` built
from `ssl.ca.location` (a PEM file, a directory of hashed certificates, or `probe`; unset: the
system's CAs, as librdkafka), `ssl.ca.pem`, `ssl.certificate.location`, `ssl.key.location`,
`ssl.key.password`, `ssl.cipher.suites`, `enable.ssl.certificate.verification` and
`ssl.endpoint.identification.algorithm` (`https`, the default: the certificate must name the
host dialled; `none`). SASL: `sasl.mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with
`sasl.username` and `sasl.password`. A property librdkafka knows but the proxy cannot honour,
and GSSAPI or OAUTHBEARER (librdkafka's default mechanism is GSSAPI), are a `ConfigError`
naming the property: the proxy never connects other than as configured.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from sidecar.errors import ConfigError

PLAINTEXT: Final = "plaintext"
SSL: Final = "ssl"
SASL_PLAINTEXT: Final = "sasl_plaintext"
SASL_SSL: Final = "sasl_ssl"
PROTOCOLS: Final = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
PLAIN: Final = "PLAIN"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
MECHANISMS: Final = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
#: librdkafka's default `sasl.mechanism`.
_DEFAULT_MECHANISM: Final = "GSSAPI"
#: TLS properties librdkafka knows that the proxy cannot honour -> what to use instead.
_TLS_REFUSED: Final[dict[str, str]] = {
    "ssl.certificate.pem": "put the certificate in a file: ssl.certificate.location",
    "ssl.key.pem": "put the key in a file: ssl.key.location",
    "ssl.keystore.location": "a PKCS#12 keystore: use PEM files (ssl.certificate.location, "
    "ssl.key.location)",
    "ssl.keystore.password": "a PKCS#12 keystore: use PEM files (ssl.key.password)",
    "ssl.crl.location": "certificate revocation lists are not checked",
    "ssl.curves.list": "the TLS curves are OpenSSL's defaults",
    "ssl.sigalgs.list": "the signature algorithms are OpenSSL's defaults",
    "ssl.providers": "OpenSSL providers are not loaded",
    "ssl.engine.location": "OpenSSL engines are not loaded",
    "ssl.engine.id": "OpenSSL engines are not loaded",
    "ssl.ca.certificate.stores": "a Windows certificate store: use ssl.ca.location",
}
#: Values of ssl.endpoint.identification.algorithm.
_HOSTNAME_CHECKS: Final = {"https": True, "none": False}
_BOOLEANS: Final = {"true": True, "false": False}


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """The proxy's own SASL identity."""

    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"SaslCredentials({self.mechanism}, {self.username!r}, password=***)"


@dataclass(frozen=True, slots=True)
class UpstreamSecurity:
    """TLS and SASL of every upstream connection (None: not used)."""

    protocol: str
    tls: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None

    @property
    def check_hostname(self) -> bool:
        """Whether the broker's certificate must name the host dialled."""
        return self.tls is not None and self.tls.check_hostname


#: Upstream in PLAINTEXT: no TLS, no SASL.
PLAINTEXT_UPSTREAM: Final = UpstreamSecurity(PLAINTEXT)


def upstream_security(config: Mapping[str, str]) -> UpstreamSecurity:
    """The upstream security librdkafka `config` describes (see module).

    Raises:
        ConfigError: a protocol, mechanism or property the proxy cannot honour, a credential
            missing, or a certificate, key or CA that does not load; the message names the
            property.
    """
    protocol = config.get("security.protocol", PLAINTEXT).lower()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"security.protocol {protocol!r} is not one of {', '.join(PROTOCOLS)} "
            "(ZDICT_KAFKA__SECURITY_PROTOCOL)"
        )
    tls = tls_context(config) if protocol in (SSL, SASL_SSL) else None
    sasl = sasl_credentials(config) if protocol in (SASL_PLAINTEXT, SASL_SSL) else None
    return UpstreamSecurity(protocol, tls, sasl)


def tls_context(config: Mapping[str, str]) -> ssl.SSLContext:
    """The client TLS context of librdkafka's `ssl.*` properties in `config` (see module).

    Raises:
        ConfigError: as `upstream_security`.
    """
    for name, instead in _TLS_REFUSED.items():
        if config.get(name):
            raise ConfigError(f"{name} is not supported by the proxy: {instead} ({_env(name)})")
    verify = _choice(config, "enable.ssl.certificate.verification", _BOOLEANS, "true")
    check_hostname = _choice(
        config, "ssl.endpoint.identification.algorithm", _HOSTNAME_CHECKS, "https"
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = verify and check_hostname
    if not verify:
        context.verify_mode = ssl.CERT_NONE
    ca = config.get("ssl.ca.location", "")
    pem = config.get("ssl.ca.pem", "")
    if not ca and not pem:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)  # as librdkafka: the system's CAs
    _load("ssl.ca.location", ca, lambda: _load_ca(context, ca))
    _load("ssl.ca.pem", pem, lambda: context.load_verify_locations(cadata=pem))
    certificate = config.get("ssl.certificate.location", "")
    key = config.get("ssl.key.location", "")
    if bool(certificate) != bool(key):
        missing = "ssl.key.location" if certificate else "ssl.certificate.location"
        raise ConfigError(
            f"{missing} is missing: a client certificate takes both ssl.certificate.location "
            f"and ssl.key.location ({_env(missing)})"
        )
    password = config.get("ssl.key.password") or None
    _load(
        "ssl.certificate.location",
        certificate,
        lambda: context.load_cert_chain(certificate, key, password),
    )
    ciphers = config.get("ssl.cipher.suites", "")
    _load("ssl.cipher.suites", ciphers, lambda: context.set_ciphers(ciphers))
    return context


def sasl_credentials(config: Mapping[str, str]) -> SaslCredentials:
    """The proxy's SASL mechanism and credentials from `config`.

    Raises:
        ConfigError: GSSAPI, OAUTHBEARER or another mechanism, or no username or password.
    """
    configured = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    mechanism = (configured or _DEFAULT_MECHANISM).strip().upper()
    if mechanism not in MECHANISMS:
        default = "" if configured else " (librdkafka's default when unset)"
        raise ConfigError(
            f"sasl.mechanism {mechanism}{default} is not supported by the proxy: it "
            f"authenticates upstream with {', '.join(MECHANISMS)} (ZDICT_KAFKA__SASL_MECHANISM)"
        )
    found = {}
    for name in ("sasl.username", "sasl.password"):
        value = config.get(name, "")
        if not value:
            raise ConfigError(f"{name} is missing: {mechanism} needs it ({_env(name)})")
        found[name] = value
    return SaslCredentials(mechanism, found["sasl.username"], found["sasl.password"])


def _load_ca(context: ssl.SSLContext, location: str) -> None:
    if location == "probe":
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    elif os.path.isdir(location):
        context.load_verify_locations(capath=location)
    else:
        context.load_verify_locations(cafile=location)


def _load(name: str, value: str, load: Callable[[], object]) -> None:
    """Run `load` when `value` is set; a failure as a ConfigError naming `name`."""
    if not value:
        return
    try:
        load()
    except (OSError, ValueError, ssl.SSLError) as exc:
        shown = value if name.endswith(".location") else "(as set)"
        raise ConfigError(
            f"{name} {shown} does not load: {getattr(exc, 'strerror', None) or exc} ({_env(name)})"
        ) from None


def _choice(config: Mapping[str, str], name: str, values: Mapping[str, bool], default: str) -> bool:
    value = config.get(name, default).strip().lower()
    if value not in values:
        raise ConfigError(f"{name} {value!r} is not one of {', '.join(values)} ({_env(name)})")
    return values[value]


def _env(name: str) -> str:
    """The variable that sets librdkafka property `name`."""
    return "ZDICT_KAFKA__" + name.upper().replace(".", "_")
