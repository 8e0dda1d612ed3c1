"""The topics upstream has when the proxy starts, learned before the first client connects: the
ids of the internal topics and of the registry topic, so that a request naming one by id is
refused from the first (`access`), before any listing through the proxy has named it.

One Metadata request (every topic, no auto-creation) on a connection of the proxy's own,
secured and authenticated as the client connections are (`upstream.open_upstream`), to the
first bootstrap server that answers. Topics created later are learned from the listings that
pass, and an id no listing named is refused where records are read or changed.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from kio.schema.metadata.v12.request import MetadataRequest

from sidecar.errors import KafkaUnavailable, ProtocolError
from sidecar.proxy.addresses import Address
from sidecar.proxy.responses import parse_response
from sidecar.proxy.sasl import request_frame
from sidecar.proxy.security import UpstreamSecurity
from sidecar.proxy.topics import TopicView
from sidecar.proxy.upstream import describe, open_upstream
from sidecar.proxy.versions import METADATA

_INT32: Final = struct.Struct(">i")
#: Bytes a Metadata answer of every topic may take (about 100 bytes a partition).
MAX_ANSWER_BYTES: Final = 256 * 1024 * 1024


async def learn_topics(
    bootstrap: Sequence[Address], security: UpstreamSecurity, view: TopicView
) -> int:
    """Teach `view` every topic upstream has (names, ids, internal flags); how many there are.

    Raises:
        KafkaUnavailable: no bootstrap server answered the request.
    """
    errors = []
    for target in bootstrap:
        try:
            (reader, writer), _lifetime = await open_upstream(target, security)
        except (OSError, TimeoutError) as exc:
            errors.append(f"{target.host}:{target.port}: {describe(exc)}")
            continue
        try:
            request = MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            writer.write(request_frame(METADATA, 1, request))
            size: int = _INT32.unpack(await reader.readexactly(_INT32.size))[0]
            if not 0 < size <= MAX_ANSWER_BYTES:
                raise ProtocolError(f"upstream answered Metadata with a frame of {size} bytes")
            _, body = parse_response(METADATA, 12, await reader.readexactly(size))
        except (OSError, EOFError, ProtocolError) as exc:
            errors.append(f"{target.host}:{target.port}: {describe(exc)}")
            continue
        finally:
            writer.close()
        view.learn(body.topics)
        return len(body.topics)
    raise KafkaUnavailable(
        "the proxy cannot read upstream's topics (Metadata) at start: " + "; ".join(errors)
    )
