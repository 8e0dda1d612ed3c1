"""The proxy's own SASL exchange against a scripted broker on a loopback socket pair
(PLAIN; SCRAM-SHA-256/512 with scramp's server side; refusals carrying the broker's message),
the SASL done before any client byte is forwarded, and a client's own SaslHandshake answered
locally, never forwarded."""

from __future__ import annotations

import asyncio
import datetime
import functools
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta
from prometheus_client import CollectorRegistry
from scramp import ScramException, ScramMechanism

from sidecar.config import ProxySettings
from sidecar.errors import AuthenticationFailed
from sidecar.proxy.addresses import Address
from sidecar.proxy.client_sasl import CLIENT_SASL_APIS
from sidecar.proxy.filters import proxy_filters
from sidecar.proxy.listeners import Listeners
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.responses import encode_response
from sidecar.proxy.sasl import authenticate
from sidecar.proxy.security import SaslCredentials, UpstreamSecurity
from sidecar.proxy.throttle import Throttle
from sidecar.proxy.upstream import check_upstream, open_upstream
from sidecar.proxy.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE, served_versions
from tests.kafka_frames import read_response, request_frame

USER = "zdict-proxy"
PASSWORD = "Pw-9f2e-proxy"
#: What a Kafka broker answers a wrong password with (SaslAuthenticate's error message).
REFUSED = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism"
)


@dataclass
class Broker:
    """A scripted SASL broker: enables `mechanisms`, knows `USER` with `PASSWORD`; records
    every request (api key, version, body bytes) and answers anything else with `b"ok"`."""

    mechanisms: tuple[str, ...]
    lifetime_ms: int = 0
    tamper_signature: bool = False
    requests: list[tuple[int, int, bytes]] = field(default_factory=list)
    authenticated: list[bool] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mechanism: str | None = None
        scram: Any = None
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                api_key, version, correlation = struct.unpack_from(">hhi", frame)
                client_id_size = struct.unpack_from(">h", frame, 8)[0]
                body = frame[10 + max(client_id_size, 0) :]
                self.requests.append((api_key, version, body))
                if api_key == SASL_HANDSHAKE:
                    mechanism = body[2:].decode()
                    ok = mechanism in self.mechanisms
                    answer = self._answer(
                        api_key,
                        version,
                        error_code=ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
                        mechanisms=self.mechanisms,
                    )
                    if ok and mechanism != "PLAIN":
                        scram = ScramMechanism(mechanism).make_server(self._auth_info(mechanism))
                elif api_key == SASL_AUTHENTICATE:
                    message = body[4:]
                    answer, done = self._authenticate(api_key, version, mechanism, scram, message)
                    if done:
                        self.authenticated.append(True)
                else:
                    answer = struct.pack(">ii", 6, correlation) + b"ok"
                    writer.write(answer)
                    await writer.drain()
                    continue
                writer.write(_with_correlation(answer, correlation))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()  # cancelled: the test's event loop ends with the connection open

    def _authenticate(
        self, api_key: int, version: int, mechanism: str | None, scram: Any, message: bytes
    ) -> tuple[bytes, bool]:
        if mechanism == "PLAIN":
            if message == b"\0" + USER.encode() + b"\0" + PASSWORD.encode():
                return self._ok(api_key, version, b""), True
            return self._refused(api_key, version, mechanism), False
        text = message.decode()
        if scram.stage is None:
            scram.set_client_first(text)
            return self._ok(api_key, version, scram.get_server_first().encode(), final=False), False
        try:
            scram.set_client_final(text)
        except ScramException:
            return self._refused(api_key, version, str(mechanism)), False
        final = scram.get_server_final()
        if self.tamper_signature:
            final = final[:-4] + ("AAAA" if not final.endswith("AAAA") else "BBBB")
        return self._ok(api_key, version, final.encode()), True

    def _ok(self, api_key: int, version: int, auth: bytes, final: bool = True) -> bytes:
        lifetime = datetime.timedelta(milliseconds=self.lifetime_ms if final else 0)
        return self._answer(
            api_key,
            version,
            error_code=ErrorCode.none,
            error_message=None,
            auth_bytes=auth,
            session_lifetime=i64Timedelta.parse(lifetime),
        )

    def _refused(self, api_key: int, version: int, mechanism: str) -> bytes:
        return self._answer(
            api_key,
            version,
            error_code=ErrorCode.sasl_authentication_failed,
            error_message=f"{REFUSED} {mechanism}",
            auth_bytes=b"",
            session_lifetime=i64Timedelta.parse(datetime.timedelta(0)),
        )

    @staticmethod
    def _answer(api_key: int, version: int, **body: Any) -> bytes:
        schema: Any = load_response_schema(api_key, version)
        return encode_response(0, schema(**body))

    @staticmethod
    def _auth_info(mechanism: str) -> Any:
        info = ScramMechanism(mechanism).make_auth_info(PASSWORD, iteration_count=4096)
        return lambda username: info if username == USER else None


def _with_correlation(frame: bytes, correlation: int) -> bytes:
    return frame[:4] + struct.pack(">i", correlation) + frame[8:]


@asynccontextmanager
async def broker(b: Broker) -> AsyncIterator[Address]:
    server = await asyncio.start_server(b.serve, "127.0.0.1", 0)
    try:
        yield Address("127.0.0.1", server.sockets[0].getsockname()[1])
    finally:
        server.close()


def _security(mechanism: str, password: str = PASSWORD) -> UpstreamSecurity:
    return UpstreamSecurity("sasl_plaintext", None, SaslCredentials(mechanism, USER, password))


async def _login(b: Broker, security: UpstreamSecurity) -> int:
    async with broker(b) as address:
        (_, writer), lifetime = await open_upstream(address, security, timeout=10)
        writer.close()
        return lifetime


def test_plain_sends_a_handshake_v1_then_one_authenticate_v1_with_the_credentials() -> None:
    b = Broker(("PLAIN",), lifetime_ms=3_600_000)
    assert asyncio.run(_login(b, _security("PLAIN"))) == 3_600_000
    assert b.requests == [
        (SASL_HANDSHAKE, 1, struct.pack(">h", 5) + b"PLAIN"),
        (SASL_AUTHENTICATE, 1, struct.pack(">i", 26) + b"\0zdict-proxy\0Pw-9f2e-proxy"),
    ]
    assert b.authenticated == [True]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_sends_client_first_and_client_final_and_checks_the_server_signature(
    mechanism: str,
) -> None:
    b = Broker(("PLAIN", mechanism))
    assert asyncio.run(_login(b, _security(mechanism))) == 0
    (handshake, first, final) = b.requests
    assert handshake == (SASL_HANDSHAKE, 1, struct.pack(">h", len(mechanism)) + mechanism.encode())
    first_text, final_text = first[2][4:].decode(), final[2][4:].decode()
    assert first_text.startswith("n,,n=zdict-proxy,r="), "no channel binding, as Kafka's SCRAM"
    nonce = first_text.split("r=", 1)[1]
    assert final_text.startswith(f"c=biws,r={nonce}") and ",p=" in final_text
    assert b.authenticated == [True]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_wrong_password_fails_with_the_brokers_message(mechanism: str) -> None:
    b = Broker(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
    with pytest.raises(AuthenticationFailed) as refused:
        asyncio.run(_login(b, _security(mechanism, "wrong-password")))
    message = str(refused.value)
    assert message.startswith("127.0.0.1:")
    assert f"{REFUSED} {mechanism} (SASL_AUTHENTICATION_FAILED; {mechanism} as 'zdict-proxy')" in (
        message
    )
    assert "wrong-password" not in message and b.authenticated == []


def test_a_mechanism_upstream_does_not_enable_names_those_it_does() -> None:
    b = Broker(("SCRAM-SHA-512",))
    with pytest.raises(AuthenticationFailed) as refused:
        asyncio.run(_login(b, _security("PLAIN")))
    assert "does not enable SASL mechanism PLAIN: it enables SCRAM-SHA-512" in str(refused.value)


def test_a_scram_server_signature_that_does_not_verify_is_refused() -> None:
    b = Broker(("SCRAM-SHA-256",), tamper_signature=True)
    with pytest.raises(AuthenticationFailed) as refused:
        asyncio.run(_login(b, _security("SCRAM-SHA-256")))
    assert "SCRAM-SHA-256 answer does not verify" in str(refused.value)


def test_the_start_check_fails_at_once_on_a_refusal() -> None:
    async def run() -> str:
        async with broker(Broker(("PLAIN",))) as address:
            with pytest.raises(AuthenticationFailed) as refused:
                await check_upstream([address], _security("PLAIN", "nope"), timeout=60)
        return str(refused.value)

    assert REFUSED in asyncio.run(run())


def test_upstream_closing_mid_exchange_is_a_connection_error() -> None:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        writer.close()

    async def run() -> None:
        server = await asyncio.start_server(closing, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.sockets[0].getsockname()[1]
        )
        try:
            await authenticate(reader, writer, SaslCredentials("PLAIN", USER, PASSWORD))
        finally:
            writer.close()
            server.close()

    with pytest.raises(ConnectionError, match="closed the connection during the SASL exchange"):
        asyncio.run(run())


# -- through the listeners -----------------------------------------------------------------------


@asynccontextmanager
async def proxy(
    b: Broker, security: UpstreamSecurity, registry: CollectorRegistry
) -> AsyncIterator[tuple[str, int]]:
    async with broker(b) as upstream:
        settings = ProxySettings(listen="127.0.0.1:0", broker_port_base=40000)
        metrics = ForwardMetrics(registry)
        filters = functools.partial(proxy_filters, settings, metrics)
        listeners = Listeners(settings, [upstream], metrics, filters, security)
        address = await listeners.start()
        try:
            yield address.host, address.port
        finally:
            await listeners.stop()


def _closed(registry: CollectorRegistry, reason: str) -> float | None:
    return registry.get_sample_value("zdict_proxy_closed_connections_total", {"reason": reason})


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
    return await asyncio.wait_for(reader.readexactly(size), 5)


def test_every_upstream_connection_authenticates_before_the_clients_first_byte() -> None:
    b = Broker(("SCRAM-SHA-512",))

    async def run() -> bytes:
        async with proxy(b, _security("SCRAM-SHA-512"), CollectorRegistry()) as (host, port):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request_frame(16, 4, 7, states_filter=()))  # ListGroups
            answer = await _read_frame(reader)
            writer.close()
            return answer

    assert asyncio.run(run()) == struct.pack(">i", 7) + b"ok"
    assert [key for key, _, _ in b.requests] == [
        SASL_HANDSHAKE,
        SASL_AUTHENTICATE,
        SASL_AUTHENTICATE,
        16,
    ]
    assert b.authenticated == [True]


@pytest.mark.parametrize(
    ("api_key", "version", "body", "error"),
    [
        (SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}, ErrorCode.unsupported_sasl_mechanism),
        (SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}, ErrorCode.unsupported_sasl_mechanism),
        (SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0u\0p"}, ErrorCode.illegal_sasl_state),
    ],
)
def test_a_clients_own_sasl_request_is_answered_locally_and_never_forwarded(
    api_key: int, version: int, body: dict[str, Any], error: ErrorCode
) -> None:
    b = Broker(("PLAIN",))
    registry = CollectorRegistry()

    async def run() -> tuple[Any, bytes]:
        async with proxy(b, _security("PLAIN"), registry) as (host, port):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request_frame(16, 4, 1, states_filter=()))
            writer.write(request_frame(api_key, version, 2, **body))
            first = await _read_frame(reader)
            _, answer = read_response(api_key, version, await _read_frame(reader))
            closed = await asyncio.wait_for(reader.read(1), 5)
            writer.close()
            return (first, answer), closed

    (first, answer), closed = asyncio.run(run())
    assert first == struct.pack(">i", 1) + b"ok", "the answers under way first"
    assert answer.error_code == error
    if api_key == SASL_HANDSHAKE:
        assert answer.mechanisms == ()
    else:
        assert "no sasl.* settings" in answer.error_message
    assert closed == b"", "then the connection is closed, as a broker closes it"
    assert [key for key, _, _ in b.requests] == [SASL_HANDSHAKE, SASL_AUTHENTICATE, 16], (
        "only the proxy's own SASL and the ListGroups reached upstream"
    )
    assert _closed(registry, "client_sasl") == 1


def test_a_refused_upstream_login_closes_the_client_connection_and_is_counted() -> None:
    b = Broker(("PLAIN",))
    registry = CollectorRegistry()

    async def run() -> bytes:
        async with proxy(b, _security("PLAIN", "wrong"), registry) as (host, port):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request_frame(16, 4, 1, states_filter=()))
            closed = await asyncio.wait_for(reader.read(1), 5)
            writer.close()
            return closed

    assert asyncio.run(run()) == b""
    assert [key for key, _, _ in b.requests] == [SASL_HANDSHAKE, SASL_AUTHENTICATE]
    assert _closed(registry, "upstream_auth_failed") == 1


def test_the_refusal_log_line_is_written_once_per_interval_with_the_count_held_back() -> None:
    now = [100.0]
    throttle = Throttle(10.0, clock=lambda: now[0])
    admitted = []
    for step in (0.0, 1.0, 1.0, 9.0, 0.5):
        now[0] += step
        admitted.append(throttle.admit())
    assert admitted == [0, None, None, 2, None]


def test_the_sasl_apis_stay_listed_so_a_sasl_client_sends_a_handshake_answered_here() -> None:
    assert served_versions(SASL_HANDSHAKE) == (0, 1)
    assert served_versions(SASL_AUTHENTICATE) == (0, 2)
    assert {SASL_HANDSHAKE, SASL_AUTHENTICATE} == CLIENT_SASL_APIS
