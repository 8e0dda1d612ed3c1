"""The Produce filter: every Produce request is read whole and rewritten in place
(`produce.ProduceRewriter`: values encoded, refusals answered), a slice of
`proxy.produce_slice_ms` at a time, other connections served between two. Without a rewriter
(the proxy compresses nothing) requests go as they came, and one with acks=0 awaits no answer,
as a broker sends none. It handles the versions `produce_request` reads: the proxy serves no
other (`api_versions.ServedVersions`).
"""

from __future__ import annotations

from typing import Protocol

from sidecar.proxy.filter import Answer, Context, Expected, Forward, Keys, Later, Request
from sidecar.proxy.frames import RequestHeader, produce_acks
from sidecar.proxy.produce import Outcome
from sidecar.proxy.produce_request import FIRST_VERSION, LAST_VERSION
from sidecar.proxy.versions import PRODUCE, request_header_version


class ProduceSteps(Protocol):
    """One Produce request being rewritten (`sidecar.proxy.produce.Rewriting`)."""

    def run(self, seconds: float) -> Outcome | None:
        """Rewrite on for about `seconds`; the outcome once done (None: more to do)."""
        ...


class RewritesProduce(Protocol):
    """What the filter asks of its Produce rewriter (`sidecar.proxy.produce.ProduceRewriter`)."""

    def start(self, frame: bytes, header: RequestHeader, flexible: bool) -> ProduceSteps:
        """The rewriting of the Produce request `frame`: the frame to forward, or the answer
        in its place, a slice at a time."""
        ...


class ProduceFilter:
    """Rewrites Produce requests (see module)."""

    def __init__(self, rewriter: RewritesProduce | None, slice_seconds: float) -> None:
        """`rewriter`: None, requests go as they came; `slice_seconds`: how long a request's
        rewriting holds the event loop at a time."""
        self.rewriter = rewriter
        self.slice_seconds = slice_seconds
        self.request_keys: Keys = {PRODUCE: (FIRST_VERSION, LAST_VERSION)}

    def on_request(self, request: Request, context: Context) -> Forward | Answer | Later | None:
        header = request.header
        flexible = request_header_version(PRODUCE, header.version) >= 2
        if self.rewriter is None:
            if produce_acks(request.frame, header, flexible) == 0:
                return Forward(None)  # a broker does not answer acks=0
            return None
        steps = _Rewriting(self.rewriter.start(request.frame, header, flexible), self, header)
        action = steps.run()
        return Later(steps) if action is None else action


class _Rewriting:
    """One request's rewriting, run by its connection a slice at a time."""

    __slots__ = ("_filter", "_header", "_steps")

    def __init__(self, steps: ProduceSteps, produce: ProduceFilter, header: RequestHeader) -> None:
        self._steps = steps
        self._filter = produce
        self._header = header

    def run(self) -> Forward | Answer | None:
        outcome = self._steps.run(self._filter.slice_seconds)
        if outcome is None:
            return None
        if outcome.answer is not None:
            return Answer(outcome.answer)
        if outcome.acks == 0:
            return Forward(None, outcome.frame)  # a broker does not answer acks=0
        header = self._header
        return Forward(Expected(PRODUCE, header.version, header.correlation_id), outcome.frame)
