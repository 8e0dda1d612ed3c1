"""The proxy's per-record wire readers and writers timed (timeit, best of 5), on realistic
batches: 500 generated ~100-byte JSON events a batch with a key and a header each, read as a
Produce batch (`BatchRewriter.read`), written back encoded (`write`), and those encoded batches
decoded as a Fetch partition (`PartitionDecoder.rewrite`); a ProduceResponse walked by hand
(`names_no_broker`) and a Fetch response checked against its schema (`bounded.check`), each
array of entities in them 8 entries long (8 topics of 8 partitions).

    .venv/bin/python -m tests.wire_timeit              # the compiled modules, where built
    ZDICT_PURE_PYTHON=1 .venv/bin/python -m tests.wire_timeit

Microseconds per call; compare runs on one machine, one after the other.
"""

from __future__ import annotations

import dataclasses
import timeit
from collections.abc import Callable
from typing import Any

import zstandard
from kio.index import load_response_schema

from sidecar.bench.events import generate
from sidecar.codec import Decoder, Encoder, StaticResolver
from sidecar.proxy.batch_choice import write
from sidecar.proxy.batches import Allowance, BatchLimits, BatchRewriter
from sidecar.proxy.bounded import check
from sidecar.proxy.fetched import DecodeWork, PartitionDecoder
from sidecar.proxy.produce_response import names_no_broker
from sidecar.proxy.responses import encode_response
from sidecar.proxy.versions import FETCH, PRODUCE
from tests.record_batches import NewRecord, encode_batch
from tests.unit.forward_messages import filled
from tests.unit.log_registry import dictionary

RECORDS = 500
LIMIT = 1 << 26
ENTRIES = 8


def _widened(entity: Any) -> Any:
    """`entity` (a kio message) with each array of entities in it `ENTRIES` entries long."""
    changes = {}
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            changes[field.name] = tuple(_widened(value[0]) for _ in range(ENTRIES))
    return dataclasses.replace(entity, **changes)


def _response(api_key: int, version: int) -> bytes:
    """A response frame of `api_key` at `version` (size prefix excluded), no broker named."""
    body = _widened(filled(load_response_schema(api_key, version), node_endpoints=()))
    return encode_response(5, body)[4:]


def _best(call: Callable[[], object], number: int) -> float:
    """Microseconds per call, best of 5 runs of `number` calls."""
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def main() -> None:
    events = list(generate("product_viewed", 6000, seed=7))
    samples: list[bytes | bytearray | memoryview] = list(events[:4000])
    trained = dictionary(zstandard.train_dictionary(8192, samples).as_bytes(), 32768)
    values = events[4000 : 4000 + RECORDS]
    stored = encode_batch(
        [
            NewRecord(v, key=b"user-%d" % i, headers=[("trace", b"%08x" % i)])
            for i, v in enumerate(values)
        ]
    )
    rewriter = BatchRewriter(BatchLimits(1 << 20, 1 << 20, "zd", "none"))
    encoder = Encoder(trained, min_size=16)
    partition = rewriter.read(stored, Allowance(10**6, 1 << 30))
    encoded = encoder.encode_batch(partition.inputs)
    written = write(rewriter, partition, encoded)
    fetched = PartitionDecoder(Decoder(StaticResolver([trained])), "none")
    produce_response = _response(PRODUCE, 11)
    fetch_schema = load_response_schema(FETCH, 16)
    fetch_response = _response(FETCH, 16)
    body_at = check(fetch_schema.__header_schema__, fetch_response)
    assert names_no_broker(PRODUCE, 11, produce_response)
    assert check(fetch_schema, fetch_response, body_at) == len(fetch_response)

    rows = {
        "produce batch read": (lambda: rewriter.read(stored, Allowance(10**6, 1 << 30)), 200),
        "produce batch write": (lambda: write(rewriter, partition, encoded), 200),
        "fetch batch decode": (
            lambda: fetched.rewrite(written, limit=LIMIT, first=True, work=DecodeWork(LIMIT)),
            100,
        ),
        "produce response walk": (lambda: names_no_broker(PRODUCE, 11, produce_response), 5000),
        "fetch response check": (lambda: check(fetch_schema, fetch_response, body_at), 2000),
    }
    for name, (call, number) in rows.items():
        per_call = _best(call, number)
        print(f"{name:<22} {per_call:10.2f} us")


if __name__ == "__main__":
    main()
