"""The SASL exchange the proxy starts on each fresh upstream connection, with its
own credentials, before any byte of the client's is forwarded.

SaslHandshake v1 names the mechanism (v1 needs no ApiVersions first: the client's own
ApiVersions request comes later, forwarded on the authenticated connection); then SaslAuthenticate
v1 carries the mechanism's messages (KIP-152): PLAIN one message (`\\0username\\0password`),
SCRAM-SHA-256/512 the client-first and client-final messages of RFC 5802, made and checked
(the server's signature too) by `scramp`, without channel binding as Kafka's SCRAM. The
messages are encoded and read with kio. A broker's refusal is an `AuthenticationFailed`
carrying the broker's error message; upstream closing the connection mid-exchange a
`ConnectionError`.
"""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Generator
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v1 import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1 import SaslHandshakeRequest
from kio.serial import entity_writer
from kio.static.primitive import i16, i32
from scramp import ScramClient, ScramException

from sidecar.errors import AuthenticationFailed, ProtocolError
from sidecar.proxy.responses import parse_response
from sidecar.proxy.security import PLAIN, SaslCredentials
from sidecar.proxy.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE

#: The client id of the proxy's own requests (broker logs and quotas see it).
CLIENT_ID: Final = "zdict-sidecar-proxy"
#: Bytes a SASL answer may take: a SCRAM server message is a few hundred.
MAX_RESPONSE_BYTES: Final = 64 * 1024
_INT32: Final = struct.Struct(">i")

#: A mechanism's client side: yields its messages, is sent the server's answer to each.
Conversation = Generator[bytes, bytes, None]


async def authenticate(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, credentials: SaslCredentials
) -> int:
    """Authenticate the connection as `credentials`; the session lifetime the broker set, in
    milliseconds (0: none, KIP-368's `connections.max.reauth.ms` unset).

    Raises:
        AuthenticationFailed: the broker refused the mechanism or the credentials, or its
            SCRAM answer does not verify.
        ConnectionError: upstream closed the connection during the exchange.
        ProtocolError: upstream's answer does not parse.
    """
    exchange = _Exchange(reader, writer)
    handshake = await exchange.call(
        SASL_HANDSHAKE, SaslHandshakeRequest(mechanism=credentials.mechanism)
    )
    if handshake.error_code != ErrorCode.none:
        raise AuthenticationFailed(_handshake_refusal(credentials.mechanism, handshake))
    conversation = _conversation(credentials)
    try:
        message = next(conversation)
        while True:
            answer = await exchange.call(
                SASL_AUTHENTICATE, SaslAuthenticateRequest(auth_bytes=message)
            )
            if answer.error_code != ErrorCode.none:
                raise AuthenticationFailed(
                    f"{answer.error_message or 'no message'} ({answer.error_code.name.upper()}; "
                    f"{credentials.mechanism} as {credentials.username!r})"
                )
            try:
                message = conversation.send(bytes(answer.auth_bytes))
            except StopIteration:
                return int(answer.session_lifetime.total_seconds() * 1000)
    except (ScramException, UnicodeDecodeError) as exc:
        raise AuthenticationFailed(
            f"upstream's {credentials.mechanism} answer does not verify: {exc}"
        ) from None


def plain_message(credentials: SaslCredentials) -> bytes:
    """PLAIN's one message (RFC 4616): no authorisation id, the username, the password."""
    return b"\0" + credentials.username.encode() + b"\0" + credentials.password.encode()


def _conversation(credentials: SaslCredentials) -> Conversation:
    if credentials.mechanism == PLAIN:
        yield plain_message(credentials)
        return
    client = ScramClient([credentials.mechanism], credentials.username, credentials.password)
    server_first = yield client.get_client_first().encode()
    client.set_server_first(server_first.decode())
    server_final = yield client.get_client_final().encode()
    client.set_server_final(server_final.decode())  # checks the server's signature


def _handshake_refusal(mechanism: str, handshake: Any) -> str:
    if handshake.error_code == ErrorCode.unsupported_sasl_mechanism:
        enabled = ", ".join(handshake.mechanisms) or "none"
        return (
            f"upstream does not enable SASL mechanism {mechanism}: it enables {enabled} "
            "(ZDICT_KAFKA__SASL_MECHANISM)"
        )
    if handshake.error_code == ErrorCode.illegal_sasl_state:
        return (
            "upstream's listener does not take SASL (ILLEGAL_SASL_STATE): its "
            "security.protocol is not SASL_* (ZDICT_KAFKA__SECURITY_PROTOCOL)"
        )
    return f"upstream refused SaslHandshake for {mechanism}: {handshake.error_code.name.upper()}"


class _Exchange:
    """Requests of the proxy's own on one connection, answered in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation_id = 0

    async def call(self, api_key: int, body: Any) -> Any:
        """Send `body` (a kio v1 request) and read its answer (a kio payload)."""
        self.correlation_id += 1
        self.writer.write(request_frame(api_key, self.correlation_id, body))
        await self.writer.drain()
        try:
            size: int = _INT32.unpack(await self.reader.readexactly(_INT32.size))[0]
            if not 0 < size <= MAX_RESPONSE_BYTES:
                raise ProtocolError(
                    f"upstream answered a SASL request with a frame of {size} bytes"
                )
            frame = await self.reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise ConnectionError(
                f"upstream closed the connection during the SASL exchange (api key {api_key})"
            ) from None
        correlation_id, answer = parse_response(api_key, int(body.__version__), frame)
        if correlation_id != self.correlation_id:
            raise ProtocolError(
                f"upstream answered correlation id {correlation_id} where "
                f"{self.correlation_id} was next"
            )
        return answer


def request_frame(api_key: int, correlation_id: int, body: Any) -> bytes:
    """A request frame (size prefix included) of the proxy's own, header v1."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_class = type(body).__header_schema__
    header = header_class(
        request_api_key=i16(api_key),
        request_api_version=i16(int(body.__version__)),
        correlation_id=i32(correlation_id),
        client_id=CLIENT_ID,
    )
    entity_writer(header_class)(buffer, header)
    entity_writer(type(body))(buffer, body)
    data = buffer.getbuffer()
    _INT32.pack_into(data, 0, len(data) - _INT32.size)
    return bytes(data)
