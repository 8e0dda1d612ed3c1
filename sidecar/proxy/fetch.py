"""Fetch responses as the proxy's clients get them: records decoded, the registry
topic refused, broker addresses (v16+) rewritten.

Every Fetch response is read whole (at most `proxy.max_fetch_bytes`, taken from the proxy's
budget as it arrives) and parsed with kio. Then, per partition:

* the **registry topic's** partitions are answered TOPIC_AUTHORIZATION_FAILED without records
  (unless `proxy.show_internal_topics`): it holds every namespace's dictionaries, whose content
  comes from sampled records. Known by name (v4-v12) or by the id a listing named (v13+);
* the **records** are decoded (`fetched.PartitionDecoder`) unless the client reads them as
  stored (`proxy.fetch_decode`, `proxy.raw_fetch_client_ids`); everything else of the
  partition, its aborted transactions, offsets and tagged fields, is written back as it came.
  A Fetch below v10 cannot carry zstd (KIP-110): its zstd batches, decoded or not, go out in
  `proxy.fetch_compression`'s codec, or uncompressed when that is `input` or `zstd`, so a
  consumer without zstd reads what the proxy stored with the default `output_compression`.

The response stops growing when the next batch would take it past `proxy.max_fetch_bytes` or
past the room the connection has (the budget's free bytes, within the connection's
`proxy.max_unread_bytes`): the rest of that partition and the records of every later one
are left out (empty records, no error), as a broker does at the client's `fetch.max.bytes`,
and the client fetches them again from the same offsets. The response's first batch always goes
out, so a consumer progresses: decoded, or as stored if alone it is above what the connection
could ever take; while the room is short for now (the budget held by others, or answers of the
connection's unread) it is decoded if it fits `FIRST_ROOM` (a small allowance past the budget),
else left for the next Fetch. Memory: a partition's decoding holds twice its bound from the
budget while it runs (the batch inflated, then its records decoded), the output's bytes after,
and twice the output while the response is framed; so a response decodes to at most half of
`proxy.max_unread_bytes` (and of the response bound). What is held is what is allocated: a
large decoded value is copied once, into its batch (`fetched`; a small one into its record
first), the batches once, into the frame (`responses.encode_response` hands over its buffer),
and the frame is what the client's transport keeps until written.

Decoding runs on one thread of its own, a partition at a time, the clients taking turns round
robin per client address (`turns`: many connections from one address share its turns): the event
loop serves the other connections meanwhile, and a registry read the decoder waits for (a
dictionary it has not seen) blocks no one else's I/O.

A record the decoder refuses is sent as stored (see `fetched`), counted and logged at most once
a minute per topic.

Work: each response may cost `proxy.fetch_decode_budget_bytes` of decoding (`fetched.DecodeWork`:
bytes inflated, records failed or decoded, whatever their outcome); past it the partition stops
at a batch boundary, and the rest of the response's first batch goes as stored (counted in
`zdict_proxy_fetch_over_budget_responses_total`, logged at most once a minute per topic). So a
decoding job on the thread is bounded, and the clients' jobs take turns there, a partition at
a time. Dictionary ids the registry does not have are looked up at most once per
`registry.follow_interval` for every client together (`lookups`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, Literal, cast

from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from sidecar.codec import Decoder
from sidecar.codec.decoder import DictionaryResolver
from sidecar.dictionaries.model import Dictionary
from sidecar.errors import RegistryUnavailable, UnknownDictionary, ZdictError
from sidecar.logs import get_logger
from sidecar.proxy.addresses import Address
from sidecar.proxy.fetch_metrics import FetchMetrics
from sidecar.proxy.fetched import DecodeWork, FetchCompression, PartitionDecoder, Rewritten
from sidecar.proxy.frames import PREFIX_BYTES
from sidecar.proxy.node_addresses import rewrite, upstream_nodes
from sidecar.proxy.responses import encode_response, parse_response
from sidecar.proxy.topics import TopicView
from sidecar.proxy.turns import FairTurns
from sidecar.proxy.versions import FETCH

log = get_logger(__name__)

#: `proxy.fetch_decode`: decode for every client (but `proxy.raw_fetch_client_ids`), or none.
FetchDecode = Literal["all", "none"]
#: Fetch versions that may carry zstd batches (KIP-110: a broker refuses them to older ones).
ZSTD_FROM: Final = 10
#: Fetch versions from which topics are named by id.
TOPIC_IDS_FROM: Final = 13
#: Fetch versions from which responses name brokers (NodeEndpoints, KIP-951).
NODE_ENDPOINTS_FROM: Final = 16
#: Bytes the first partition of a response may decode to whatever the budget holds: at most one
#: such allowance per connection is taken past `proxy.max_buffered_bytes`.
FIRST_ROOM: Final = 256 * 1024
#: Seconds between two `fetch_records_not_decoded` lines of one topic.
FAILURE_LOG_INTERVAL: Final = 60.0
#: Dictionary ids `RecentMisses` remembers at most.
_MAX_FAILED_IDS: Final = 1024
#: The metrics' topic label for a topic id no listing named.
UNKNOWN_TOPIC: Final = "unknown"

#: The nodes a response names -> their local addresses (None: no listener).
LocateNodes = Callable[[Mapping[int, Address]], Awaitable[dict[int, Address | None]]]


class RecentMisses:
    """A resolver that remembers, for `ttl` seconds, the ids its inner resolver failed on.

    The registry's resolver reads the registry to its end at every unknown id (and waits up to
    `registry.timeout` when it does not answer): a batch of records naming an id the registry
    does not have would read it once per record, and every fetch would wait again for a
    registry that is down."""

    def __init__(
        self,
        inner: DictionaryResolver,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.ttl = ttl
        self._clock = clock
        self._failed: dict[int, tuple[float, type[ZdictError], str]] = {}

    def get(self, dict_id: int) -> Dictionary:
        failed = self._failed.get(dict_id)
        if failed is not None and self._clock() - failed[0] < self.ttl:
            raise failed[1](failed[2])
        try:
            return self.inner.get(dict_id)
        except (UnknownDictionary, RegistryUnavailable) as exc:
            if len(self._failed) >= _MAX_FAILED_IDS:
                self._failed.clear()  # ids from a stream of garbage: bounded
            self._failed[dict_id] = (self._clock(), type(exc), str(exc))
            raise

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


class FetchDecoding:
    """Rewrites Fetch responses for the clients (see module); shared by every connection."""

    def __init__(
        self,
        decoder: Decoder,
        *,
        topics: TopicView,
        metrics: FetchMetrics,
        decode: FetchDecode = "all",
        raw_client_ids: Iterable[str] = (),
        compression: FetchCompression = "input",
        max_bytes: int,
        max_unread_bytes: int,
        decode_budget: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.decoder = decoder
        self.topics = topics
        self.metrics = metrics
        self.decode = decode
        self.raw_client_ids = frozenset(raw_client_ids)
        #: Bytes a Fetch response may have, as upstream sends it and as the client gets it.
        self.max_bytes = max_bytes
        #: Bytes one connection may hold for its client (`proxy.max_unread_bytes`).
        self.max_unread_bytes = max_unread_bytes
        #: Work one response's decoding may cost (`fetched.DecodeWork`).
        self.decode_budget = decode_budget
        self._partitions = PartitionDecoder(decoder, compression)
        self._clock = clock
        self._logged: dict[tuple[str, str], float] = {}
        # One thread: decoding is CPU-bound Python (the GIL gives nothing to a second one), and
        # `PartitionDecoder` keeps a compressor that is not shared between threads.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="zdict-fetch")
        #: Clients take turns on the thread, a partition at a time, round robin per client
        #: address; only the partition decoding holds its reservation.
        self._turns = FairTurns()

    def decodes_for(self, client_id: str | None) -> bool:
        """Whether records fetched by `client_id` are decoded."""
        return self.decode == "all" and (client_id or "") not in self.raw_client_ids

    async def rewrite(
        self,
        version: int,
        frame: bytes,
        *,
        client_id: str | None,
        free: Callable[[], int],
        hold: Callable[[int], None],
        locate: LocateNodes,
        client: str = "",
    ) -> bytes:
        """The response frame to send for upstream's Fetch `frame` (no size prefix), for a
        client at address `client` (its turns on the decoder are that address's).

        `free()` says how many bytes the connection may still take from the budget; `hold(n)`
        takes `n` bytes from it (gives `-n` back when negative; the rest is given back by the
        caller once the response is written).

        Raises:
            ProtocolError: the frame does not parse as a Fetch response of `version`.
        """
        correlation_id, body = parse_response(FETCH, version, frame)
        decode = self.decodes_for(client_id)
        started = time.perf_counter()
        # What the connection could take at best, the response read from upstream held, with
        # twice the output held while decoding.
        best = min(self.max_bytes, self.max_unread_bytes) - PREFIX_BYTES - len(frame)
        state = _Progress(
            limit=max(best // 2, 0), work=DecodeWork(self.decode_budget), client=client
        )
        topics = []
        for topic in body.responses:
            name = topic.topic if version < TOPIC_IDS_FROM else self.topics.name(topic.topic_id)
            partitions = []
            for partition in topic.partitions:
                if self.topics.refused(name):
                    partitions.append(_refused(partition))
                    self.metrics.refused()
                elif not decode or not partition.records:
                    partitions.append(partition)
                else:
                    partitions.append(
                        await self._decoded(
                            partition, name, version >= ZSTD_FROM, state, free, hold
                        )
                    )
            topics.append(dataclasses.replace(topic, partitions=tuple(partitions)))
        body = dataclasses.replace(body, responses=tuple(topics))
        if state.decoded_partitions:
            self.metrics.decode_seconds(time.perf_counter() - started)
        if state.work.left() <= 0:
            self.metrics.over_budget()
        if version >= NODE_ENDPOINTS_FROM and body.node_endpoints:
            body = rewrite(FETCH, body, await locate(upstream_nodes(FETCH, body)))
        # Framing writes the records once more (the parsed response holds them meanwhile):
        # held for that time, nothing else runs on the loop until the frame is returned.
        if not state.size:
            return encode_response(correlation_id, body)
        hold(state.size)
        framed = encode_response(correlation_id, body)
        hold(-state.size)
        return framed

    async def _decoded(
        self,
        partition: Any,
        topic: str | None,
        zstd: bool,
        state: _Progress,
        free: Callable[[], int],
        hold: Callable[[int], None],
    ) -> Any:
        label = topic or UNKNOWN_TOPIC
        if state.full:
            self.metrics.held_back()
            return dataclasses.replace(partition, records=Records(b""))
        loop = asyncio.get_running_loop()
        async with self._turns.turn(state.client):
            room = state.limit - state.size
            limit = min(room, free() // 2)
            # The first batch goes as stored only when it could never fit; when the room is
            # short for now, it waits for the next Fetch unless it fits FIRST_ROOM.
            first = state.size == 0 and limit >= room
            if state.size == 0 and not first:
                limit = max(limit, min(room, FIRST_ROOM))
            # Held until the output is known; the connection gives all back if it ends.
            hold(2 * limit)
            result: Rewritten = await loop.run_in_executor(
                self._executor,
                functools.partial(
                    self._partitions.rewrite,
                    partition.records,  # read as bytes, not copied
                    limit=limit,
                    first=first,
                    work=state.work,
                    zstd=zstd,
                ),
            )
            hold(len(result.data) - 2 * limit)
        state.size += len(result.data)
        state.decoded_partitions += 1
        self.metrics.records(
            label, result.decoded, result.passed, result.failed, result.over_budget
        )
        if result.failed:
            self._log_once(
                label,
                "fetch_records_not_decoded",
                records=result.failed,
                error=result.failure,
                detail="sent to the client as stored, with their zd header (see "
                'zdict_proxy_fetch_records_total{outcome="failed"}); logged once a minute per '
                "topic",
            )
        if result.budget_spent or state.work.left() <= 0:
            self._log_once(
                label,
                "fetch_decode_budget_spent",
                records=result.over_budget,
                error=f"a Fetch response's decoding reached ZDICT_PROXY__FETCH_DECODE_BUDGET_BYTES "
                f"({self.decode_budget})",
                detail="the rest of its first batch sent as stored, later batches held back "
                "(see zdict_proxy_fetch_over_budget_responses_total); logged once a minute per "
                "topic",
            )
        if result.held_back is not None:
            state.full = True
            self.metrics.held_back()
            log.debug("fetch_partition_held_back", topic=label, reason=result.held_back)
        # The bytes themselves (kio writes any bytes there): `Records(...)` would copy them.
        return dataclasses.replace(partition, records=cast(Records, result.data))

    def _log_once(self, topic: str, event: str, **fields: object) -> None:
        """Log `event` of `topic`, at most once per `FAILURE_LOG_INTERVAL`."""
        now = self._clock()
        last = self._logged.get((topic, event))
        if last is not None and now - last < FAILURE_LOG_INTERVAL:
            return
        self._logged[(topic, event)] = now
        log.warning(event, topic=topic, **fields)

    def close(self) -> None:
        """Stop the decoding thread and close the decoder's resolver."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        self.decoder.close()


@dataclasses.dataclass(slots=True)
class _Progress:
    """How far one response's output has grown."""

    limit: int
    #: The decoding work the response may still cost.
    work: DecodeWork
    #: The client's address, whose turns on the decoder these are.
    client: str
    size: int = 0
    decoded_partitions: int = 0
    #: No more records in this response (the limit or the budget is reached).
    full: bool = False


def _refused(partition: Any) -> Any:
    """A partition of the registry topic as clients get it: an authorization error, no data."""
    return dataclasses.replace(
        partition,
        error_code=ErrorCode.topic_authorization_failed,
        records=None,
        aborted_transactions=None,
    )
