"""Opening the proxy's connections to upstream brokers: TCP, then TLS, then SASL.

Every client connection gets its own upstream connection, opened here before any of the
client's bytes is forwarded: TLS (`security.UpstreamSecurity.tls`) with the host dialled as the
name the certificate must carry (unless `ssl.endpoint.identification.algorithm=none`), then the
proxy's own SASL exchange (`sasl`). The client's requests then travel on a connection that is
already authenticated as the proxy. At start, `check_upstream` opens one such connection to a
bootstrap server, so wrong credentials or a certificate that does not verify stop the proxy
with the cause rather than fail every client later.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Sequence
from typing import Final

from sidecar.errors import AuthenticationFailed, KafkaUnavailable, ProtocolError
from sidecar.logs import get_logger
from sidecar.proxy.addresses import Address
from sidecar.proxy.sasl import authenticate
from sidecar.proxy.security import UpstreamSecurity

log = get_logger(__name__)

#: Seconds an upstream connection may take to open, TLS and SASL included.
CONNECT_TIMEOUT: Final = 10.0
#: Seconds between two rounds of the start check while no bootstrap server answers.
RETRY_INTERVAL: Final = 1.0

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_upstream(
    target: Address, security: UpstreamSecurity, timeout: float = CONNECT_TIMEOUT
) -> tuple[Streams, int]:
    """A connection to `target`, secured and authenticated as `security` says, and the SASL
    session lifetime in milliseconds (0: none or no SASL).

    Raises:
        AuthenticationFailed: the broker refused the proxy's SASL authentication (its message
            carries the broker's, prefixed by `target`).
        OSError: `target` cannot be reached, its TLS handshake failed (`ssl.SSLError`), it
            closed the connection during SASL, or its SASL answer does not parse.
        TimeoutError: all this took more than `timeout` seconds.
    """
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(
            target.host,
            target.port,
            ssl=security.tls,
            server_hostname=target.host if security.tls is not None else None,
        )
        try:
            lifetime = 0
            if security.sasl is not None:
                lifetime = await authenticate(reader, writer, security.sasl)
        except AuthenticationFailed as exc:
            await _close(writer)
            raise AuthenticationFailed(f"{target.host}:{target.port}: {exc}") from None
        except ProtocolError as exc:
            await _close(writer)
            raise ConnectionError(f"{exc}") from None
        except BaseException:
            await _close(writer)
            raise
    return (reader, writer), lifetime


async def check_upstream(
    bootstrap: Sequence[Address], security: UpstreamSecurity, timeout: float
) -> None:
    """Open (and close) one upstream connection to the first bootstrap server that accepts one,
    trying again for at most `timeout` seconds while none does.

    Raises:
        AuthenticationFailed: the broker refused the proxy's credentials (at once: trying again
            would not change them).
        KafkaUnavailable: no bootstrap server could be reached, or its TLS handshake failed,
            within `timeout` (every server's error in the message).
    """
    deadline = time.monotonic() + timeout
    while True:
        errors = []
        for target in bootstrap:
            try:
                (_, writer), lifetime = await open_upstream(target, security)
            except (OSError, TimeoutError) as exc:
                errors.append(f"{target.host}:{target.port}: {describe(exc)}")
                continue
            await _close(writer)
            log.info(
                "upstream_checked",
                upstream=f"{target.host}:{target.port}",
                security_protocol=security.protocol.upper(),
                sasl_mechanism=None if security.sasl is None else security.sasl.mechanism,
                hostname_check=security.check_hostname,
                session_lifetime_ms=lifetime or None,
            )
            return
        if time.monotonic() + RETRY_INTERVAL > deadline:
            raise KafkaUnavailable(
                f"the proxy cannot reach upstream as {security.protocol.upper()} within "
                f"{timeout:g} s (ZDICT_PROXY__START_TIMEOUT): " + "; ".join(errors)
            )
        await asyncio.sleep(RETRY_INTERVAL)


def describe(exc: BaseException) -> str:
    """An upstream connection failure in words (TLS failures named as such)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the TLS handshake failed: certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"the TLS handshake failed: {exc.reason or exc}"
    if isinstance(exc, TimeoutError):
        return f"no connection within {CONNECT_TIMEOUT:g} s"
    return str(exc) or type(exc).__name__


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, asyncio.CancelledError):
        await writer.wait_closed()


async def reachable(target: Address, timeout: float) -> bool:
    """Whether `target` accepts a TCP connection within `timeout` seconds (closed at once:
    nothing is exchanged)."""
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(target.host, target.port)
    except (OSError, TimeoutError):
        return False
    await _close(writer)
    return True
