"""Produce requests rewritten in place by the proxy, or refused at the door.

For every Produce request (v3-v12): the frame is read with a bounded reader
(`produce_request`), each partition's record batches are rewritten (`batches`: values encoded
by the topic's namespace, everything else of the batch kept, CRC-32C computed again) and the
frame written again with the new records; acks, timeout, transactional id and the order of
topics and partitions stay as the client sent them. The broker then applies its own
idempotence and transactions to the batches as the producer numbered them.

A request is refused whole, nothing of it forwarded, when a topic is not on the allow-list
(TOPIC_AUTHORIZATION_FAILED) or is one more than the proxy serves (`proxy.max_topics`,
POLICY_VIOLATION), its acks are not 0, 1 or -1 (INVALID_REQUIRED_ACKS), or a batch or
record is refused (see `batches`). The proxy answers it itself, in request order with
upstream's answers: each refused partition gets its error and message; the other partitions of
the request get REQUEST_TIMED_OUT, which clients retry (with the same sequence numbers: nothing
of them was written), so a request mixing a bad batch with good ones delivers the good ones on
the retry. A refused request with acks=0 gets no answer (a broker gives none); the connection is
closed, as a broker closes it when an acks=0 request fails, so the client sees it.

A batch full enough that the output codec stores its values in fewer bytes raw than as frames
is written with its values as they came, no `zd` header, and left to the batch compression
(`codec.output_mode=auto`, the default; `frames` turns it off): the proxy stores no more than
the better of the two. Which batches: `batch_choice`, per topic (`FramesOrRaw`), its records
counted as outcome `raw` when they go unencoded, as encoded when written both ways.

Per partition rewritten, the raw values are offered to the namespace's training sample (at a
position counted by the proxy: the upstream offset is not known before upstream answers).
One log line per kind of refusal per `REFUSAL_LOG_INTERVAL` seconds; the kinds are the proxy's
own names, never a client's string.

A connection rewrites a request a slice at a time (`ProduceRewriter.start`, `Rewriting.run`):
the work is cut into steps (at most `batches.STEP_RECORDS` records read or written, at most
`ENCODE_SLICE` encoded), and the event loop serves the other connections between slices, so a
request of 100,000 records does not hold it for the whole request.
"""

from __future__ import annotations

import bisect
import functools
import math
import sys
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Final, overload

from kio.schema.errors import ErrorCode

from sidecar.codec import Transformed
from sidecar.dictionaries.model import is_valid_namespace
from sidecar.errors import ProduceRefused, ProtocolError
from sidecar.logs import get_logger
from sidecar.namespaces import Namespace
from sidecar.proxy.allowlist import TopicAllowList
from sidecar.proxy.batch_choice import FramesOrRaw, write_steps
from sidecar.proxy.batches import Allowance, BatchRewriter, Inputs, ReadPartition, encode_checked
from sidecar.proxy.frames import RequestHeader
from sidecar.proxy.metrics import ForwardMetrics
from sidecar.proxy.produce_request import (
    ProduceRequest,
    TopicData,
    encode_produce,
    parse_produce,
)
from sidecar.proxy.responses import build, encode_response, nested, response_class

log = get_logger(__name__)

#: Seconds between two log lines about the same kind of refusal.
REFUSAL_LOG_INTERVAL: Final = 10.0
#: Characters of a client's string (topic, client id) a log line shows.
SHOWN_CHARS: Final = 100
PRODUCE: Final = 0
#: Why a request was refused, beyond `batches`' kinds: a metrics label and log key.
TOPIC_REFUSED: Final = "topic"
ACKS_REFUSED: Final = "acks"
#: Records encoded in one step (`batches.STEP_RECORDS` are read, or written, in one).
ENCODE_SLICE: Final = 4096
#: What one partition read yields: (partition number, index, batches) of each partition
#: holding records, or the first refusal: (topic number, partition number) and why.
_Read = list[tuple[int, int, ReadPartition]] | tuple[tuple[int, int], ProduceRefused]
#: What a topic's rewriting yields: the refusal, if any (see `ProduceRewriter._topic`).
_Refusal = tuple[tuple[int, int], ProduceRefused] | None


class Sampled:
    """A value offered to a training sample (`sampling.SampledRecord`)."""

    __slots__ = ("_offset", "_partition", "_value")

    def __init__(self, partition: int, offset: int, value: bytes | None) -> None:
        self._partition, self._offset, self._value = partition, offset, value

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value


class SampledValues(Sequence[Sampled]):
    """One partition's values as a training sample reads them, each made a `Sampled` only
    when the reservoir takes it (it keeps one in `sampling.every`)."""

    __slots__ = ("_first", "_partition", "_values")

    def __init__(self, partition: int, first: int, values: list[bytes | None]) -> None:
        self._partition, self._first, self._values = partition, first, values

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, index: int) -> Sampled: ...

    @overload
    def __getitem__(self, index: slice) -> list[Sampled]: ...

    def __getitem__(self, index: int | slice) -> Sampled | list[Sampled]:
        if isinstance(index, slice):
            positions = range(len(self._values))[index]
            values = self._values
            return [Sampled(self._partition, self._first + i, values[i]) for i in positions]
        position = range(len(self._values))[index]
        return Sampled(self._partition, self._first + position, self._values[position])


#: One partition forwarded: topic, partition, batches, batches written with frames, records,
#: bytes sent upstream, bytes as received.
Stored = tuple[str, int, int, int, int, int, int]


class Rewriting:
    """One Produce request being rewritten a slice at a time (`ProduceRewriter.start`)."""

    __slots__ = ("_clock", "_steps")

    def __init__(self, steps: Iterator[Outcome | None], clock: Callable[[], float]) -> None:
        self._steps = steps
        self._clock = clock

    def run(self, seconds: float) -> Outcome | None:
        """Rewrite on for about `seconds` (a step is not cut short); the outcome once the
        request is done (None: there is more to do, call again).

        Raises:
            ProtocolError: as `ProduceRewriter.rewrite`.
        """
        until = self._clock() + seconds
        for step in self._steps:
            if step is not None:
                return step
            if self._clock() >= until:
                return None
        raise AssertionError("a Produce rewriting ended without its outcome")


class Outcome:
    """What becomes of one Produce request: the frame to forward, or the answer to give."""

    __slots__ = ("acks", "answer", "frame")

    def __init__(self, acks: int, frame: bytes | None = None, answer: bytes | None = None) -> None:
        self.acks = acks
        #: The rewritten request, size prefix included (None: refused).
        self.frame = frame
        #: The local answer, size prefix included (a refused request with acks other than 0).
        self.answer = answer


class ProduceRewriter:
    """Serves the Produce requests of every connection (see module); runs on the event loop."""

    def __init__(
        self,
        *,
        batches: BatchRewriter,
        allowed: TopicAllowList,
        namespace: Callable[[str], Namespace],
        metrics: ForwardMetrics,
        max_records: int,
        max_decompressed_bytes: int,
        raw_batches: bool = True,
        compare_batches: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        namespace: the namespace of an allowed topic, set up on first use; raises
            `ProduceRefused` when none can be (`routes.ProxyRoutes.route`).
        max_records: records one request may hold.
        max_decompressed_bytes: bytes one request's batches may decompress to.
        raw_batches: write the values of batches that hold at least the namespace's
            crossover raw (`codec.output_mode=auto`); False: frames always.
        compare_batches: with `raw_batches`, write a batch near the crossover both ways and
            keep the fewer bytes (`proxy.compare_batches`; see module).
        """
        self.batches = batches
        self.allowed = allowed
        self.namespace = namespace
        self.metrics = metrics
        self.max_records = max_records
        self.max_decompressed_bytes = max_decompressed_bytes
        self.raw_batches = raw_batches
        self.compare_batches = compare_batches
        self.clock = clock
        self._logged: dict[str, float] = {}
        self._positions: dict[tuple[str, int], int] = {}
        #: Per topic served, which of its batches go as they came (`batch_choice`).
        self._rules: dict[str, FramesOrRaw] = {}
        self.requests = 0
        self.refused = 0

    def rewrite(self, frame: bytes, header: RequestHeader, flexible: bool) -> Outcome:
        """The frame to forward for the Produce request `frame` (size prefix excluded), or
        the answer to give in its place, rewritten all at once.

        Raises:
            ProtocolError: the frame does not parse, or a refused request has acks=0 (the
                connection is closed).
        """
        outcome = self.start(frame, header, flexible).run(math.inf)
        assert outcome is not None
        return outcome

    def start(self, frame: bytes, header: RequestHeader, flexible: bool) -> Rewriting:
        """The rewriting of the Produce request `frame` (as `rewrite`), run a slice at a time
        (see module); nothing is read before its first `run`."""
        return Rewriting(self._steps(frame, header, flexible), self.clock)

    def _steps(
        self, frame: bytes, header: RequestHeader, flexible: bool
    ) -> Iterator[Outcome | None]:
        """`rewrite` in steps: None after each, the outcome last."""
        request = parse_produce(frame, header, flexible)
        self.requests += 1
        refusals: dict[tuple[int, int], ProduceRefused] = {}
        first: ProduceRefused | None = None
        if request.acks not in (0, 1, -1):
            first = ProduceRefused(
                ErrorCode.invalid_required_acks,
                ACKS_REFUSED,
                f"acks={request.acks}: use 0, 1 or -1 (all)",
            )
        allowance = Allowance(self.max_records, self.max_decompressed_bytes)
        records: dict[tuple[int, int], bytes] = {}
        offered: list[tuple[Namespace, int, list[bytes | None]]] = []
        stored: list[Stored] = []
        where = ""
        for t, topic in enumerate(request.topics):
            refused = _topic_refusal(self.allowed, topic.name)
            if refused is not None:
                for p in range(len(topic.partitions)):
                    refusals[(t, p)] = refused
                if first is None:
                    first, where = refused, topic.name
                continue
            if first is not None:
                continue
            refusal = yield from self._topic(t, topic, allowance, records, offered, stored)
            if refusal is not None:
                refusals[refusal[0]] = first = refusal[1]
                where = topic.name
        if first is None:
            self._offer(offered)
            for name, partition, batches, framed, count, sent, received in stored:
                self.metrics.stored(name, batches, count, sent, received)
                self.metrics.output_batches(name, partition, framed, batches - framed)
            yield Outcome(request.acks, frame=encode_produce(frame, request, records))
            return
        self.refused += 1
        self.metrics.produce_refused(first.kind)
        self._log(first, header, where)
        if request.acks == 0:
            raise ProtocolError(
                f"a Produce request with acks=0 was refused ({first}): the connection is "
                "closed, as a broker closes it"
            )
        yield Outcome(request.acks, answer=_answer(request, refusals, first))

    def _topic(
        self,
        t: int,
        topic: TopicData,
        allowance: Allowance,
        records: dict[tuple[int, int], bytes],
        offered: list[tuple[Namespace, int, list[bytes | None]]],
        stored: list[Stored],
    ) -> Generator[None, None, _Refusal]:
        """Rewrite the partitions of topic number `t` into `records`, in steps: every batch
        read, the values of all encoded (`ENCODE_SLICE` records a call), each partition written
        again, its bytes as sent and as received noted in `stored` (counted once the request is
        forwarded). A refusal: (topic number, partition number) and why; nothing of the topic
        is then written."""
        # The batches that will go raw are read for their values only: which ones, by the
        # crossover the topic had at its last request (a new dictionary may move it: then they
        # are read again whole, once).
        rule = self._rule(topic.name)
        read = yield from self._read(t, topic, allowance, rule.values_from())
        if isinstance(read, tuple):
            return read
        if not read:
            return None
        try:
            namespace = self.namespace(topic.name)
        except ProduceRefused as exc:  # a topic past the proxy's bound (proxy.max_topics)
            return (t, read[0][0]), exc
        latest = [[value for value, _ in batches.inputs] for _, _, batches in read]
        if self._updated(topic.name, rule, namespace, latest):
            # The first read took every bound: this one is not counted against the request.
            again = Allowance(self.max_records, self.max_decompressed_bytes)
            read = yield from self._read(t, topic, again, None)
            if isinstance(read, tuple):  # the same checks passed on these bytes: not expected
                return read
        inputs: Inputs = []
        for _, _, batches in read:
            inputs += batches.inputs
        partitions = [batches for _, _, batches in read]
        encoded: list[Transformed] | None = None
        if rule.all_raw(partitions):
            # Every value written as it came: counted, and no result made per record.
            namespace.count_raw(inputs, sum(part.value_bytes for part in partitions))
        else:
            raw = rule.raw_positions(partitions)
            encoded = []
            for start in range(0, len(inputs), ENCODE_SLICE):
                end = start + ENCODE_SLICE
                # The raw positions of this slice, counted from its start (`raw` ascends).
                mine = raw[bisect.bisect_left(raw, start) : bisect.bisect_left(raw, end)]
                shifted = [i - start for i in mine] if start else mine
                try:
                    encoded += encode_checked(
                        functools.partial(namespace.encode_with_raw, raw=shifted),
                        inputs[start:end] if start or end < len(inputs) else inputs,
                    )
                except ProduceRefused as exc:
                    return (t, read[0][0]), exc
                yield None
        at = 0
        for (p, index, batches), values in zip(read, latest, strict=True):
            count = len(batches.inputs)
            # Batches written again take the level chosen at training; those passed as they came
            # keep the client's: recompressing them takes 10-125 µs a record on JSON and
            # kilobyte documents, past the proxy's target (bench savings).
            if encoded is None:
                out = self.batches.write_as_read(batches, namespace.batch_level)
            else:
                out = yield from write_steps(
                    self.batches, batches, encoded[at : at + count], rule, namespace.batch_level
                )
            records[(t, p)] = out
            received = topic.partitions[p].records
            stored.append(
                (
                    topic.name,
                    index,
                    len(batches.batches),
                    batches.framed,
                    count,
                    len(out),
                    len(received or b""),
                )
            )
            at += count
            offered.append((namespace, index, values))
            yield None
        return None

    @staticmethod
    def _updated(
        topic: str, rule: FramesOrRaw, namespace: Namespace, latest: list[list[bytes | None]]
    ) -> bool:
        """`rule.update`, and a crossover that is news logged (`output_crossover`): what
        decides which batches go raw."""
        moved = rule.update(namespace, latest)
        if rule.to_log():
            log.info(
                "output_crossover",
                topic=topic[:SHOWN_CHARS],
                crossover=rule.crossover,
                zstd_level=namespace.batch_level,
                raw_from=rule.raw_from,
                compare_from=rule.compare_from,
            )
        return moved

    def _rule(self, topic: str) -> FramesOrRaw:
        """`topic`'s frames-or-raw rule, made on its first request."""
        rule = self._rules.get(topic)
        if rule is None:
            rule = self._rules[topic] = FramesOrRaw(
                self.batches.limits.output_codec,
                raw=self.raw_batches,
                compare=self.compare_batches,
                clock=self.clock,
            )
        return rule

    def _read(
        self, t: int, topic: TopicData, allowance: Allowance, values_from: float | None
    ) -> Generator[None, None, _Read]:
        """(partition number, index, batches) of each partition of topic number `t` holding
        records, read in steps (`BatchRewriter.read_steps`); or the first refusal: (topic
        number, partition number) and why."""
        read: list[tuple[int, int, ReadPartition]] = []
        for p, partition in enumerate(topic.partitions):
            data = partition.records
            if data is None:
                continue
            try:
                batches = yield from self.batches.read_steps(data, allowance, values_from)
            except ProduceRefused as exc:
                return (t, p), exc
            read.append((p, partition.index, batches))
        return read

    def _offer(self, offered: list[tuple[Namespace, int, list[bytes | None]]]) -> None:
        for namespace, partition, values in offered:
            reservoir = namespace.reservoir
            if reservoir is None or not values:
                continue
            key = (namespace.topic, partition)
            position = self._positions.get(key, 0)
            self._positions[key] = position + len(values)
            reservoir.offer(SampledValues(partition, position, values))

    def _log(self, refused: ProduceRefused, header: RequestHeader, topic: str) -> None:
        now = self.clock()
        if now - self._logged.get(refused.kind, -1e18) < REFUSAL_LOG_INTERVAL:
            return
        self._logged[refused.kind] = now
        log.warning(
            "produce_refused",
            kind=refused.kind,
            error_code=ErrorCode(refused.code).name.upper(),
            topic=topic[:SHOWN_CHARS],
            client_id=(header.client_id or "")[:SHOWN_CHARS],
            error=str(refused),
        )


def _topic_refusal(allowed: TopicAllowList, name: str) -> ProduceRefused | None:
    """Why a client may not produce to topic `name` (None: it may)."""
    if not allowed.allows(name):
        return ProduceRefused(
            ErrorCode.topic_authorization_failed,
            TOPIC_REFUSED,
            "the topic is not on the proxy's allow-list (ZDICT_PROXY__ALLOWED_TOPICS, "
            "ZDICT_PROXY__TOPICS; internal and registry topics never are)",
        )
    # A pattern of the allow-list may match a name no topic can have, and each topic served
    # is a namespace of the store, named as Kafka names topics.
    if not is_valid_namespace(name):
        return ProduceRefused(
            ErrorCode.invalid_topic_exception,
            TOPIC_REFUSED,
            "not a topic name: use 1-249 characters of A-Z a-z 0-9 . _ -, not starting with '.'",
        )
    return None


def _answer(
    request: ProduceRequest,
    refusals: dict[tuple[int, int], ProduceRefused],
    first: ProduceRefused,
) -> bytes:
    """The ProduceResponse frame for a refused request (see module)."""
    cls = response_class(PRODUCE, request.header.version)
    topic_class = nested(cls, "TopicProduceResponse")
    partition_class = nested(cls, "PartitionProduceResponse")
    leader_class = getattr(sys.modules[cls.__module__], "LeaderIdAndEpoch", None)
    extra: dict[str, Any] = {}
    if leader_class is not None:
        extra["current_leader"] = leader_class(leader_id=-1, leader_epoch=-1)
    topics = []
    for t, topic in enumerate(request.topics):
        partitions = []
        for p, partition in enumerate(topic.partitions):
            refused = refusals.get((t, p))
            if refused is None and first.kind == ACKS_REFUSED:
                refused = first
            code = ErrorCode(refused.code) if refused else ErrorCode.request_timed_out
            message = (
                str(refused)
                if refused
                else f"not written: another partition of the request was refused ({first})"
            )
            partitions.append(
                build(
                    partition_class,
                    index=partition.index,
                    error_code=code,
                    base_offset=-1,
                    log_append_time=None,
                    log_start_offset=-1,
                    record_errors=(),
                    error_message=message,
                    **extra,
                )
            )
        topics.append(topic_class(name=topic.name, partition_responses=tuple(partitions)))
    body = build(cls, responses=tuple(topics))
    return encode_response(request.header.correlation_id, body)
