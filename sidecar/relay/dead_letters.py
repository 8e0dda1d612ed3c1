"""Dead letters: records the relay cannot process, set aside with the reason instead of stopping.

Off by default: without a dead-letter topic the relay stops at such a record, commits nothing
past it, and exits 1 naming it (fail fast: a restart after the cause is fixed resumes there).
With `ZDICT_RELAY__DEAD_LETTER_TOPIC` (a name, `{topic}` for the input topic's), the record goes
there instead, exactly as it was consumed (key, value, headers, timestamp), with headers saying
where it came from and why, and the relay goes on; it counts as done once the dead letter is
acknowledged, like any output record. Kafka Connect's `errors.tolerance=all` with
`errors.deadletterqueue.topic.name` works the same way.

Headers added (values UTF-8):

==========================  =========================================================
``zdict.error.topic``       the input topic
``zdict.error.partition``   the input partition
``zdict.error.offset``      the input offset
``zdict.error.stage``       ``encode``, ``decode`` or ``produce``
``zdict.error.class``       the exception class (e.g. ``CorruptFrame``, ``RecordTooLarge``)
``zdict.error.message``     its message, at most 1,000 characters
==========================  =========================================================
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "zdict.error."
#: Characters of the error message kept in the header.
MESSAGE_LIMIT: Final = 1000
#: Bytes a Kafka v2 record and its share of the batch may add to key + value + headers; a record
#: whose estimate is above the limit minus this is measured exactly.
RECORD_OVERHEAD: Final = 128


def error_headers(
    topic: str, partition: int, offset: int, stage: str, error: BaseException
) -> list[tuple[str, bytes]]:
    """The headers a dead letter gets on top of its original ones."""
    message = " ".join(str(error).split())[:MESSAGE_LIMIT]
    return [
        (PREFIX + "topic", topic.encode()),
        (PREFIX + "partition", str(partition).encode()),
        (PREFIX + "offset", str(offset).encode()),
        (PREFIX + "stage", stage.encode()),
        (PREFIX + "class", type(error).__name__.encode()),
        (PREFIX + "message", message.encode()),
    ]


def record_size(key: bytes | None, value: bytes | None, headers: object) -> int:
    """Bytes of a record's key, value and headers as Kafka stores them, plus the overhead."""
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for name, header in headers or ():  # type: ignore[attr-defined]
        size += 2 + len(name.encode()) + 2 + len(header or b"")
    return size
