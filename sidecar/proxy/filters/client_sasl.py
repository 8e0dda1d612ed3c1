"""The client SASL filter: a client's own SaslHandshake or SaslAuthenticate is never forwarded
(upstream's connection is authenticated as the proxy): it is answered as by a broker with no
mechanism enabled (`client_sasl`) once the answers under way are written, and the connection
ends. A client retries within milliseconds, so the log line saying so is written at most once
every `client_sasl.LOG_INTERVAL` seconds for the process (with how many were held back).
"""

from __future__ import annotations

from sidecar.logs import get_logger
from sidecar.proxy.client_sasl import (
    ADVICE,
    CLIENT_SASL_APIS,
    LOG_INTERVAL,
    answer,
    read_header,
    requested_mechanism,
)
from sidecar.proxy.filter import ANY_VERSION, Answer, Context, Keys, Request
from sidecar.proxy.throttle import Throttle
from sidecar.proxy.versions import api_name

log = get_logger(__name__)

#: The reason the connection ends (`zdict_proxy_closed_connections_total`).
CLIENT_SASL = "client_sasl"


class ClientSaslFilter:
    """Answers clients' SASL requests locally (see module)."""

    def __init__(self) -> None:
        self.request_keys: Keys = {api_key: (0, ANY_VERSION) for api_key in CLIENT_SASL_APIS}
        # One key: client ids are the client's choice, so they never key anything kept.
        self._log = Throttle(LOG_INTERVAL)

    def on_request(self, request: Request, context: Context) -> Answer:
        header = read_header(request.frame)
        held = self._log.admit()
        if held is not None:
            log.warning(
                "client_sasl_refused",
                peer=context.peer,
                client_id=header.client_id,
                api=api_name(header.api_key),
                mechanism=requested_mechanism(request.frame, header),
                repeated=held or None,
                error=ADVICE,
            )
        return Answer(answer(header), close=CLIENT_SASL)
