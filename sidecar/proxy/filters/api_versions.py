"""The API allow-list and the ApiVersions intersection.

`ServedVersions`: an API version is served when kio knows its request and response
(`versions.served_versions`) within the range of every filter that reads each request of the
API (`caps`: Produce's, `filters.produce`); a request of another API or version closes the
connection once the answers due before it are written (`request_refused`), as a broker does.

`ApiVersionsFilter`: the ApiVersions answer lists what upstream offers intersected with what is
served, the refused APIs (`access`: the admin APIs) left out. A client asking ApiVersions above
the proxy's versions is asked upstream in v0 and answered UNSUPPORTED_VERSION in v0 (KIP-511),
as a broker answers it.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Awaitable, Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from sidecar.proxy.filter import (
    ANY_VERSION,
    Close,
    Context,
    Expected,
    Forward,
    Keys,
    Request,
    Response,
)
from sidecar.proxy.frames import PREFIX_BYTES, api_versions_v0
from sidecar.proxy.versions import API_VERSIONS, api_name, served_versions

_ERROR_CODE: Final = struct.Struct(">h")
#: An API key -> the versions served (None: not served).
Served = Callable[[int], "tuple[int, int] | None"]


class ServedVersions:
    """Refuses the APIs and versions the proxy does not serve (see module)."""

    request_keys: Keys | None = None

    def __init__(self, caps: Keys) -> None:
        """`caps`: API key -> the versions a filter reading each of its requests handles."""
        self.caps = dict(caps)
        self._served: dict[int, tuple[int, int] | None] = {}

    def served(self, api_key: int) -> tuple[int, int] | None:
        """The versions of `api_key` clients may use through the proxy (None: not served)."""
        if api_key in self._served:
            return self._served[api_key]
        served = served_versions(api_key)
        cap = self.caps.get(api_key)
        if served is not None and cap is not None:
            low, high = max(served[0], cap[0]), min(served[1], cap[1])
            served = (low, high) if low <= high else None
        self._served[api_key] = served
        return served

    def accepts(self, api_key: int, version: int) -> bool:
        """Whether a request of `api_key` in `version` is forwarded."""
        served = self.served(api_key)
        return served is not None and served[0] <= version <= served[1]

    def on_request(self, request: Request, context: Context) -> Close | None:
        if self.accepts(request.api_key, request.version):
            return None
        served = self.served(request.api_key)
        what = "not served" if served is None else f"served in v{served[0]}-v{served[1]}"
        return Close(
            f"{api_name(request.api_key)} (api key {request.api_key}) v{request.version} is not "
            f"forwarded: {what} (the proxy forwards what its ApiVersions answer lists)"
        )


class ApiVersionsFilter:
    """Asks upstream's ApiVersions and answers its intersection (see module)."""

    def __init__(self, served: Served, refused: frozenset[int]) -> None:
        """`served`: the versions served of an API key; `refused`: APIs left out."""
        self.served = served
        self.refused = refused
        self.request_keys: Keys = {API_VERSIONS: (0, ANY_VERSION)}
        self.response_keys: Keys = self.request_keys

    def on_request(self, request: Request, context: Context) -> Forward | None:
        highest = self.served(API_VERSIONS)
        if highest is None or request.version <= highest[1]:
            return None
        header = request.read_header_as(1)
        expected = Expected(API_VERSIONS, 0, header.correlation_id, marked=True)
        return Forward(expected, api_versions_v0(request.frame, header))

    def on_response(self, response: Response, context: Context) -> Awaitable[None] | None:
        # Above upstream's versions, upstream answers in v0 (KIP-511); so does the proxy.
        error = _ERROR_CODE.unpack_from(response.frame, PREFIX_BYTES)[0]
        unsupported = response.marked or error == ErrorCode.unsupported_version
        body = response.body(0 if unsupported else None)
        response.replace(filter_api_versions(body, unsupported, self.refused, self.served))
        return None

    def check_size(self, api_key: int, size: int) -> bool:
        return False


def filter_api_versions(
    body: Any,
    unsupported: bool,
    refused: frozenset[int] = frozenset(),
    served: Served = served_versions,
) -> Any:
    """Upstream's ApiVersions answer (a kio payload) limited to what the proxy serves
    (`served`), the APIs of `refused` left out; with `unsupported`, carrying
    UNSUPPORTED_VERSION (the client asked a version above ours)."""
    entries = []
    for entry in body.api_keys:
        versions = served(entry.api_key)
        if versions is None or entry.api_key in refused:
            continue
        low = max(entry.min_version, versions[0])
        high = min(entry.max_version, versions[1])
        if low <= high:
            entries.append(dataclasses.replace(entry, min_version=low, max_version=high))
    error = ErrorCode.unsupported_version if unsupported else body.error_code
    return dataclasses.replace(body, api_keys=tuple(entries), error_code=error)
