"""A connection's answers: the requests forwarded whose answers are awaited, oldest first, and
the answers upstream sends, matched to them and written to the client in request order.

Each answer is matched to the oldest request awaiting one (its correlation id checked). One the
chain reads whole (`chain.FilterChain.read_whole`) is held in the budget until written, given to
the chain and written as it makes it, now or once a task ends (upstream not read meanwhile);
every other is streamed back byte for byte as it arrives. The proxy's own answers to requests
refused at the door go right after the answer awaited before them. A response being built takes
its output from the budget as it grows (`room`, `hold`: the connection's `filter.Context`).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Awaitable
from typing import Final, Protocol

from sidecar.errors import ProtocolError
from sidecar.proxy.budget import Budget
from sidecar.proxy.chain import FilterChain
from sidecar.proxy.filter import Context, Expected, check_correlation
from sidecar.proxy.frames import PREFIX_BYTES
from sidecar.proxy.metrics import RESPONSE, ForwardMetrics
from sidecar.proxy.sides import NOT_BLOCKING, ClientSide, UpstreamSide

_INT32: Final = struct.Struct(">i")
#: Why upstream is not read: an answer is being rewritten in a task.
REWRITING: Final = "rewriting"


class Owner(Context, Protocol):
    """What the answers ask of their connection (`connection.Connection`)."""

    client: ClientSide
    upstream: UpstreamSide

    def ended(self) -> bool:
        """Whether the connection ended."""
        ...

    def answered(self) -> None:
        """An awaited answer was written."""
        ...

    def refuse_upstream(self, exc: ProtocolError) -> None:
        """Upstream sent what the proxy cannot pass on."""
        ...

    def failed(self, exc: Exception) -> None:
        """A fault of the proxy's own."""
        ...

    def resume_responses(self) -> None:
        """Go on with what upstream sent while it was not handled."""
        ...


class Correlation:
    """A connection's answers (see module)."""

    def __init__(
        self,
        owner: Owner,
        chain: FilterChain,
        *,
        budget: Budget,
        metrics: ForwardMetrics,
        max_unread_bytes: int,
    ) -> None:
        """`max_unread_bytes` (`proxy.max_unread_bytes`): bytes of answers the connection may
        hold for its client."""
        self.owner = owner
        self.chain = chain
        self.budget = budget
        self.metrics = metrics
        self.max_unread_bytes = max_unread_bytes
        #: Answers awaited, oldest first.
        self.pending: deque[Expected] = deque()
        #: The response being streamed to the client and its bytes still to come.
        self.streaming: Expected | None = None
        self._stream_left = 0
        self._stream_size = 0
        #: Bytes of the budget held for the parsed response being rewritten and written.
        self.held = 0
        self.rewriting: asyncio.Task[None] | None = None

    def close(self) -> None:
        """The connection ended: stop rewriting, give the bytes held back."""
        if self.rewriting is not None:
            self.rewriting.cancel()
        self.budget.give(self.held)
        self.held = 0

    def answer(self, answer: bytes, api_key: int) -> None:
        """Give the client `answer` (a frame of `api_key`) in request order: now if no answer
        is awaited, else right after the latest awaited one."""
        if self.pending:
            self.pending[-1].then.append(answer)
        else:
            self.owner.client.transport.write(answer)
        self.metrics.frame(api_key, RESPONSE, len(answer))

    def handle(self, buffer: bytes | bytearray) -> int:
        """Write back the answers of `buffer` while the client takes them; the offset after the
        last byte handled.

        Raises:
            ProtocolError: an answer to no request, or one that does not match its request.
        """
        pos = 0
        pending = self.pending
        owner = self.owner
        while not owner.upstream.stops - NOT_BLOCKING and not owner.ended():
            available = len(buffer) - pos
            if self.streaming is not None:
                if not available:
                    break
                pos = self._stream(buffer, pos, min(available, self._stream_left))
                continue
            if available < PREFIX_BYTES:
                break
            size: int = _INT32.unpack_from(buffer, pos)[0]
            if not pending:
                raise ProtocolError("upstream sent a response to no request")
            if size < PREFIX_BYTES:
                raise ProtocolError(f"upstream sent a response frame of {size} bytes")
            expected = pending[0]
            if not self.whole_next():
                if available < 2 * PREFIX_BYTES:
                    break
                check_correlation(expected, buffer[pos + PREFIX_BYTES : pos + 2 * PREFIX_BYTES])
                self.streaming, self._stream_left = expected, PREFIX_BYTES + size
                self._stream_size = PREFIX_BYTES + size
                continue
            self.chain.check_size(expected, size)
            end = pos + PREFIX_BYTES + size
            if len(buffer) < end:
                break
            # One copy of the answer, not two (a bytearray's slice, then its bytes).
            self._rewrite(expected, bytes(memoryview(buffer)[pos + PREFIX_BYTES : end]))
            pos = end
        return pos

    def _stream(self, buffer: bytes | bytearray, pos: int, step: int) -> int:
        """Write `step` bytes of the answer being streamed from `pos` of `buffer`; the offset
        after them."""
        whole = pos == 0 and step == len(buffer) and isinstance(buffer, bytes)
        self.owner.client.transport.write(buffer if whole else buffer[pos : pos + step])
        self._stream_left -= step
        if not self._stream_left and self.streaming is not None:
            expected, self.streaming = self.streaming, None
            self._answered(expected, self._stream_size)
        return pos + step

    def _rewrite(self, expected: Expected, frame: bytes) -> None:
        """Rewrite and write the answer `frame` (size prefix excluded) read whole, now or in a
        task (see module).

        Raises:
            ProtocolError: its correlation id is not `expected`'s.
        """
        check_correlation(expected, frame)
        # The frame's bytes stay held until its answer is written.
        size = PREFIX_BYTES + len(frame)
        upstream = self.owner.upstream
        moved = min(upstream.held, size)
        upstream.held -= moved
        self.budget.force(size - moved)
        self.held += size
        answer = self.chain.response(expected, frame, self.owner)
        if isinstance(answer, bytes):
            self._write_answer(expected, answer)
        else:
            self._rewrite_later(answer, expected)

    def _answered(self, expected: Expected, sent: int) -> None:
        """`expected` was answered with `sent` bytes: the local answers queued behind it
        follow."""
        self.pending.popleft()
        self.metrics.frame(expected.api_key, RESPONSE, sent)
        for answer in expected.then:
            self.owner.client.transport.write(answer)
        self.owner.answered()

    def _write_answer(self, expected: Expected, data: bytes) -> None:
        """Write the rewritten answer to `expected` and give its bytes back."""
        self.owner.client.transport.write(data)
        self.budget.give(self.held)
        self.held = 0
        self._answered(expected, len(data))

    def _rewrite_later(self, rewriting: Awaitable[bytes], expected: Expected) -> None:
        """Rewrite an answer in a task, upstream not read meanwhile; then go on."""
        self.owner.upstream.stop(REWRITING)
        self.rewriting = asyncio.get_running_loop().create_task(self._finish(rewriting, expected))

    async def _finish(self, rewriting: Awaitable[bytes], expected: Expected) -> None:
        owner = self.owner
        try:
            data = await rewriting
        except ProtocolError as exc:
            owner.refuse_upstream(exc)
            return
        except Exception as exc:  # a rewrite that fails ends its connection, not the proxy
            owner.failed(exc)
            return
        if owner.ended():
            return
        self.rewriting = None
        self._write_answer(expected, data)
        owner.upstream.go(REWRITING)
        owner.resume_responses()

    def room(self) -> int:
        """Bytes a response being built may still take: what the budget has free, within what
        this connection may hold for its client (`max_unread_bytes`)."""
        mine = self.max_unread_bytes - self.held - self.owner.client.writing
        return min(self.budget.limit - self.budget.used, mine)

    def hold(self, size: int) -> None:
        """Take `size` bytes of a response being built from the budget, without waiting (the
        response was sized to what was free; given back once written); a negative `size` gives
        bytes back."""
        self.held += size
        if size < 0:
            self.budget.give(-size)
        else:
            self.budget.force(size)

    def whole_next(self) -> bool:
        """Whether the next answer from upstream is read whole before it is written."""
        if self.streaming is not None or not self.pending:
            return False
        expected = self.pending[0]
        return self.chain.read_whole(expected.api_key, expected.version)
