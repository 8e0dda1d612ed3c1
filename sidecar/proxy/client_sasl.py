"""The answer to a client that starts a SASL exchange of its own with the proxy.

Clients reach the proxy on loopback in PLAINTEXT; the proxy authenticates to the brokers itself
(`sasl`), so a client's SaslHandshake or SaslAuthenticate is never forwarded (upstream's
connection is already authenticated, as the proxy). It is answered here, in the version the
client asked (within those kio knows), as a broker with no SASL mechanism would answer:
SaslHandshake with UNSUPPORTED_SASL_MECHANISM and an empty mechanism list (librdkafka and the
Java client then fail naming the mechanism and the empty list), SaslAuthenticate with
ILLEGAL_SASL_STATE and a message saying what to do; the connection is then closed, as a broker
closes it (`filters.client_sasl`). Both APIs stay in the ApiVersions answer, so a client
configured for SASL sends a SaslHandshake (and gets this answer) rather than a handshake-less
exchange the proxy could not tell from a request.
"""

from __future__ import annotations

from typing import Any, Final

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from sidecar.proxy.frames import RequestHeader, read_request_header
from sidecar.proxy.responses import encode_response
from sidecar.proxy.versions import SASL_AUTHENTICATE, SASL_HANDSHAKE, kio_versions

#: API keys answered here, never forwarded.
CLIENT_SASL_APIS: Final = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})
#: Characters of a client's mechanism name that reach the log.
_MECHANISM_CHARS: Final = 64
#: Seconds between two log lines about clients' SASL requests.
LOG_INTERVAL: Final = 10.0
#: What the client is told, and the log says, to do.
ADVICE: Final = (
    "the proxy authenticates to the brokers with its own credentials: configure the client "
    "with security.protocol=PLAINTEXT and no sasl.* settings"
)


def read_header(frame: bytes) -> RequestHeader:
    """The header of a SaslHandshake or SaslAuthenticate `frame` (size prefix excluded):
    header v2 for SaslAuthenticate v2 on (its flexible versions), v1 below.

    Raises:
        ProtocolError: the frame ends inside its header.
    """
    header = read_request_header(frame, 1)
    if header.api_key == SASL_AUTHENTICATE and header.version >= 2:
        header = read_request_header(frame, 2)
    return header


def answer(header: RequestHeader) -> bytes:
    """The response frame (size prefix included) refusing the client's SASL request `header`
    (one of `CLIENT_SASL_APIS`)."""
    low, high = kio_versions(header.api_key) or (0, 0)
    version = min(max(header.version, low), high)
    schema: Any = load_response_schema(header.api_key, version)
    if header.api_key == SASL_HANDSHAKE:
        body = schema(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=())
    else:
        body = schema(error_code=ErrorCode.illegal_sasl_state, error_message=ADVICE, auth_bytes=b"")
    return encode_response(header.correlation_id, body)


def requested_mechanism(frame: bytes, header: RequestHeader) -> str | None:
    """The mechanism a SaslHandshake `frame` names (None: another request, or unreadable)."""
    if header.api_key != SASL_HANDSHAKE or len(frame) < header.size + 2:
        return None
    length = int.from_bytes(frame[header.size : header.size + 2], "big", signed=True)
    end = header.size + 2 + length
    if length < 0 or end > len(frame):
        return None
    return frame[header.size + 2 : end].decode("utf-8", errors="replace")[:_MECHANISM_CHARS]
