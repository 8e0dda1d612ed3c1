"""A relay's output matched to its input: what was lost, duplicated or re-read."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.codec import Decoder, parse_tag

from .records import Record


@dataclass
class Match:
    """Output records matched to the input records they carry (by decoded value)."""

    inputs: int
    outputs: int
    lost: int
    duplicates: int
    rewinds: int  # per partition: times the output went back to an earlier input offset


def match_output(
    inputs: Sequence[Record],
    outputs: Sequence[Record],
    decoder: Decoder,
    dict_id: int | None = None,
    header: str = "zd",
) -> Match:
    """Decode every output record, find its input, check it, count lost and duplicated ones.

    Asserts for every output record: it decodes byte-exact to an input value, in the input's
    partition, with its key, timestamp and headers (plus ours); with `dict_id`, every duplicate
    is byte-identical to its first copy; per partition the output is the input in order,
    possibly with rewinds (a restart re-reading from the last commit) but never with a gap. Our
    header must name `dict_id` when given (any id otherwise: dictionaries may change in a run).
    """
    by_value = {r.value: r for r in inputs}
    assert len(by_value) == len(inputs), "input values must be unique to match them"
    first_copy: dict[tuple[int, int], Record] = {}
    copies: Counter[tuple[int, int]] = Counter()
    sequence: dict[int, list[int]] = defaultdict(list)
    for out in sorted(outputs, key=lambda r: (r.partition, r.offset)):
        decoded = decoder.decode(out.value, list(out.headers))
        source = by_value.get(decoded)
        assert source is not None, f"output {out.partition}@{out.offset} decodes to no input"
        assert out.partition == source.partition, "output partition differs from input's"
        assert (out.key, out.timestamp) == (source.key, source.timestamp)
        added = out.headers[len(source.headers) :]
        assert out.headers[: len(source.headers)] == source.headers, out.headers
        assert added == () or (
            len(added) == 1
            and added[0][0] == header
            and (dict_id is None or parse_tag(added[0][1]).dict_id == dict_id)
        ), out.headers
        where = (source.partition, source.offset)
        copies[where] += 1
        if where in first_copy:
            # With one dictionary a duplicate is byte-identical; when dictionaries change, a
            # re-read record may be encoded with a newer one: it still decodes to the same input.
            if dict_id is not None:
                first = first_copy[where]
                assert (out.key, out.value, out.headers, out.timestamp) == (
                    first.key,
                    first.value,
                    first.headers,
                    first.timestamp,
                ), f"duplicate of input {where} differs from its first copy"
        else:
            first_copy[where] = out
        sequence[out.partition].append(source.offset)
    rewinds = 0
    for partition, offsets in sequence.items():
        for prev, cur in itertools.pairwise(offsets):
            assert cur <= prev + 1, f"partition {partition}: gap after input offset {prev}"
            if cur <= prev:
                rewinds += 1
        assert offsets[0] == 0, f"partition {partition} starts at input offset {offsets[0]}"
    lost = sum(1 for r in inputs if (r.partition, r.offset) not in copies)
    duplicates = sum(n - 1 for n in copies.values())
    return Match(len(inputs), len(outputs), lost, duplicates, rewinds)
