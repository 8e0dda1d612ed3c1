"""The proxy's upstream security from librdkafka settings: the `ssl.SSLContext` (CA
only, a client certificate, the hostname check on and off) tried in real TLS handshakes on
loopback against a certificate authority made here, and the properties and mechanisms it
refuses with a ConfigError naming them."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from sidecar.errors import ConfigError, KafkaUnavailable
from sidecar.proxy.addresses import Address
from sidecar.proxy.security import (
    PLAINTEXT_UPSTREAM,
    SaslCredentials,
    UpstreamSecurity,
    upstream_security,
)
from sidecar.proxy.upstream import check_upstream, describe, open_upstream
from tests.pki import CertificateAuthority


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[CertificateAuthority, Path, Path]:
    """(the CA, a server keystore naming 127.0.0.1, one naming another host)."""
    ca = CertificateAuthority.create(tmp_path_factory.mktemp("pki"))
    return (
        ca,
        ca.issue("loopback", ["127.0.0.1", "localhost"], client=True),
        ca.issue("elsewhere", ["broker.elsewhere.invalid"]),
    )


@asynccontextmanager
async def tls_server(keystore: Path, client_ca: Path | None = None) -> AsyncIterator[Address]:
    """A TLS server on loopback that answers each connection with `ok` (with `client_ca`:
    it requires a client certificate signed by it)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(keystore)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    try:
        yield Address("127.0.0.1", server.sockets[0].getsockname()[1])
    finally:
        server.close()


async def _handshake(address: Address, security: UpstreamSecurity) -> bytes:
    (reader, writer), lifetime = await open_upstream(address, security, timeout=10)
    assert lifetime == 0
    data = await reader.read(2)
    writer.close()
    return data


def _ssl(ca: CertificateAuthority, **extra: str) -> UpstreamSecurity:
    return upstream_security(
        {"security.protocol": "SSL", "ssl.ca.location": str(ca.ca_pem), **extra}
    )


def test_plaintext_is_the_default_and_takes_neither_tls_nor_sasl() -> None:
    assert upstream_security({}) == PLAINTEXT_UPSTREAM
    assert upstream_security({"security.protocol": "PLAINTEXT", "ssl.keystore.location": "x"}) == (
        PLAINTEXT_UPSTREAM
    ), "ssl.* properties a protocol without TLS does not use are not refused (librdkafka too)"


def test_a_ca_only_context_checks_the_certificate_and_its_host_name(
    pki: tuple[CertificateAuthority, Path, Path],
) -> None:
    ca, loopback, elsewhere = pki
    security = _ssl(ca)
    assert security.tls is not None
    assert security.tls.verify_mode == ssl.CERT_REQUIRED and security.check_hostname
    assert [c["subject"] for c in security.tls.get_ca_certs()] == [
        ((("commonName", "zdict-sidecar test CA"),),)
    ], "only the configured CA, not the system's"

    async def run() -> tuple[bytes, BaseException]:
        async with tls_server(loopback) as good:
            answered = await _handshake(good, security)
        async with tls_server(elsewhere) as wrong:
            with pytest.raises(ssl.SSLCertVerificationError) as refused:
                await _handshake(wrong, security)
        return answered, refused.value

    answered, refused = asyncio.run(run())
    assert answered == b"ok"
    assert describe(refused).startswith("the TLS handshake failed: certificate verify failed:")
    assert "127.0.0.1" in describe(refused)


def test_the_hostname_check_off_accepts_a_certificate_naming_another_host_of_the_same_ca(
    pki: tuple[CertificateAuthority, Path, Path], tmp_path: Path
) -> None:
    ca, _, elsewhere = pki
    security = _ssl(ca, **{"ssl.endpoint.identification.algorithm": "none"})
    assert security.tls is not None and not security.check_hostname
    assert security.tls.verify_mode == ssl.CERT_REQUIRED, "the chain is still checked"
    other = CertificateAuthority.create(tmp_path / "other", "another CA")
    stranger = other.issue("stranger", ["127.0.0.1"])

    async def run() -> bytes:
        async with tls_server(elsewhere) as address:
            answered = await _handshake(address, security)
        async with tls_server(stranger) as address:
            with pytest.raises(ssl.SSLCertVerificationError):
                await _handshake(address, security)
        return answered

    assert asyncio.run(run()) == b"ok"


def test_a_client_certificate_is_presented_to_a_broker_that_requires_one(
    pki: tuple[CertificateAuthority, Path, Path],
) -> None:
    ca, loopback, _ = pki
    with_certificate = _ssl(
        ca, **{"ssl.certificate.location": str(loopback), "ssl.key.location": str(loopback)}
    )
    without = _ssl(ca)

    async def run() -> tuple[bytes, bytes | BaseException]:
        async with tls_server(loopback, client_ca=ca.ca_pem) as address:
            answered = await _handshake(address, with_certificate)
            try:
                refused: bytes | BaseException = await _handshake(address, without)
            except (ssl.SSLError, ConnectionError) as exc:
                refused = exc
        return answered, refused

    answered, refused = asyncio.run(run())
    assert answered == b"ok"
    # TLS 1.3 completes the client's handshake before the server checks: the refusal shows as
    # an alert or a closed connection on the first read.
    assert refused != b"ok"


def test_the_start_check_names_the_tls_failure_and_every_server(
    pki: tuple[CertificateAuthority, Path, Path],
) -> None:
    ca, _, elsewhere = pki

    async def run() -> str:
        async with tls_server(elsewhere) as address:
            with pytest.raises(KafkaUnavailable) as failed:
                await check_upstream([address], _ssl(ca), timeout=0.5)
        return str(failed.value)

    message = asyncio.run(run())
    assert message.startswith("the proxy cannot reach upstream as SSL within 0.5 s")
    assert "the TLS handshake failed: certificate verify failed" in message


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"ssl.keystore.location": "/k.p12"}, "ssl.keystore.location"),
        ({"ssl.key.pem": "-----BEGIN"}, "ssl.key.pem"),
        ({"ssl.crl.location": "/crl.pem"}, "ssl.crl.location"),
        ({"ssl.engine.id": "pkcs11"}, "ssl.engine.id"),
        ({"ssl.ca.location": "/nowhere/ca.pem"}, "ssl.ca.location /nowhere/ca.pem does not load"),
        ({"ssl.certificate.location": "/c.pem"}, "ssl.key.location is missing"),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "ssl.endpoint.identification"),
        ({"enable.ssl.certificate.verification": "maybe"}, "enable.ssl.certificate.verification"),
        ({"ssl.cipher.suites": "NO-SUCH-CIPHER"}, "ssl.cipher.suites (as set) does not load"),
    ],
)
def test_tls_properties_the_proxy_cannot_honour_are_refused_by_name(
    config: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        upstream_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", **config})
    assert named in str(refused.value)
    assert "(ZDICT_KAFKA__SSL_" in str(refused.value) or "(ZDICT_KAFKA__ENABLE_SSL" in str(
        refused.value
    ), "the variable that sets it"


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism OAUTHBEARER is not supported"),
        ({"sasl.mechanism": "GSSAPI"}, "sasl.mechanism GSSAPI is not supported"),
        ({}, "sasl.mechanism GSSAPI (librdkafka's default when unset) is not supported"),
        ({"sasl.mechanism": "PLAIN", "sasl.password": ""}, "sasl.password is missing"),
        ({"sasl.mechanisms": "SCRAM-SHA-1"}, "sasl.mechanism SCRAM-SHA-1 is not supported"),
        ({"security.protocol": "TLS"}, "security.protocol 'tls' is not one of"),
    ],
)
def test_mechanisms_and_protocols_the_proxy_cannot_speak_are_refused_by_name(
    config: dict[str, str], named: str
) -> None:
    base = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "p"}
    with pytest.raises(ConfigError) as refused:
        upstream_security(base | config)
    assert named in str(refused.value)


def test_sasl_credentials_are_read_and_the_password_never_shown() -> None:
    security = upstream_security(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "scram-sha-512",
            "sasl.username": "proxy",
            "sasl.password": "Pw-secret",
        }
    )
    assert security.tls is None
    assert security.sasl == SaslCredentials("SCRAM-SHA-512", "proxy", "Pw-secret")
    assert "Pw-secret" not in repr(security)
