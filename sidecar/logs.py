"""Logging: structlog, JSON lines on stderr, with stdlib logging routed through the same pipeline.

Events are names with key-value pairs, never formatted strings::

    log = get_logger(__name__)
    structlog.contextvars.bind_contextvars(topic="orders", partition=3, namespace="orders")
    log.info("dictionary_switched", dict_id=123, version=4)

Every line carries an ISO-8601 UTC `timestamp`, `level`, `logger`, `event`, the context bound
with `structlog.contextvars` and the call's own keys. Exceptions (`log.exception(...)` or
`exc_info=True`) become a structured `exception` field, without frame locals (they could hold
credentials). Values of keys that look secret are replaced by "***", in nested mappings too.

Library logs (confluent-kafka's `logger=` config option, urllib3, ...) go through stdlib logging
and come out in the same format; librdkafka's warnings and errors at most once per client and
kind every 10 s (`RepeatedLines`).
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Final, TextIO

import structlog
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import EventDict, Processor, WrappedLogger

from sidecar.errors import ConfigError

__all__ = [
    "FORMATS",
    "LEVELS",
    "REDACTED",
    "RepeatedLines",
    "configure_logging",
    "get_logger",
    "is_secret_key",
    "redact_secrets",
]

FORMATS: Final = ("auto", "json", "console")
LEVELS: Final = ("debug", "info", "warning", "error", "critical")
REDACTED: Final = "***"

# Substrings of key names whose values are never logged. Covers every librdkafka property that
# can hold a secret (its CONFIGURATION.md: sasl.password, ssl.key.password,
# ssl.keystore.password, ssl.key.pem, sasl.oauthbearer.config, sasl.oauthbearer.client.secret
# and its alias, sasl.oauthbearer.assertion.private.key.passphrase and .pem; any other *.pem as
# well), schema-registry's basic.auth.user.info and the usual suspects.
_SECRET_KEY: Final = re.compile(
    r"passw(or)?d|passphrase|pwd|secret|token|credential|api[._-]?key|private[._-]?key|"
    r"(^|[._-])pem($|[._-])|oauthbearer|jaas|authorization|auth[._-]user[._-]info|cookie",
    re.IGNORECASE,
)
# Keys structlog itself adds; never redacted (`event` would otherwise hide "token_refreshed").
_RESERVED: Final = frozenset({"event", "timestamp", "level", "logger"})
_MAX_DEPTH: Final = 5
# Marks the handler configure_logging installs, so a second call replaces it (and only it).
_HANDLER_MARK: Final = "_zdict_sidecar_handler"


def is_secret_key(key: object) -> bool:
    """True when a value stored under `key` must not be logged."""
    return isinstance(key, str) and _SECRET_KEY.search(key) is not None


def _redact(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {
            k: REDACTED if is_secret_key(k) else _redact(v, depth + 1) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_redact(v, depth + 1) for v in value)
    return value


def redact_secrets(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: "***" for values of secret-looking keys, nested mappings included."""
    for key, value in event_dict.items():
        if key in _RESERVED or key.startswith("_"):
            continue
        if is_secret_key(key):
            event_dict[key] = REDACTED
        elif isinstance(value, Mapping | list | tuple):
            event_dict[key] = _redact(value, 1)
    return event_dict


def _order_keys(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """timestamp, level, logger, event first: JSON lines read left to right the same way."""
    ordered: MutableMapping[str, Any] = {
        k: event_dict.pop(k) for k in ("timestamp", "level", "logger", "event") if k in event_dict
    }
    ordered.update(event_dict)
    return dict(ordered)


def _shared_processors() -> list[Processor]:
    """Run on every event, structlog's and stdlib's alike, before rendering."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]


class RepeatedLines(logging.Filter):
    """Lets through at most one librdkafka warning or error per client and kind (its facility,
    e.g. FAIL) every `interval` seconds; the next line let through carries `repeated`, how many
    were held back meanwhile.

    While a broker is away, librdkafka logs every failed connection attempt of every client:
    hundreds of lines in a few seconds, which would bury the one line that says why the relay
    stopped. Other loggers, and librdkafka's info and debug lines (`debug=` output), pass.
    """

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.interval = interval
        self.clock = clock
        #: (logger, client, facility) -> (when a line was last let through, held back since).
        self._seen: dict[tuple[str, str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith("librdkafka"):
            return True
        # librdkafka's lines read "FACILITY [rdkafka#consumer-3] [thrd:...]: ...".
        facility, _, rest = record.getMessage().partition(" ")
        client = rest.partition(" ")[0]
        key = (record.name, client, facility)
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.interval:
            self._seen[key] = (seen[0], seen[1] + 1)
            return False
        self._seen[key] = (now, 0)
        if seen is not None and seen[1]:
            record.repeated = seen[1]
        return True


def configure_logging(
    format: str = "auto", level: str = "info", *, stream: TextIO | None = None
) -> None:
    """Configure structlog and stdlib logging for the process; safe to call again.

    Args:
        format: "json" (one JSON object per line), "console" (human-readable) or "auto":
            console when `stream` is a terminal, else JSON.
        level: minimum level, one of `LEVELS`.
        stream: where lines go; default stderr.
    """
    if format not in FORMATS:
        raise ConfigError(f"log format {format!r} is not one of {', '.join(FORMATS)}")
    if level.lower() not in LEVELS:
        raise ConfigError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    out = sys.stderr if stream is None else stream
    tty = _isatty(out)
    if format == "auto":
        format = "console" if tty else "json"

    renderer: list[Processor]
    if format == "json":
        renderer = [
            structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False)),
            _order_keys,
            structlog.processors.JSONRenderer(),
        ]
    else:
        renderer = [
            structlog.dev.ConsoleRenderer(
                colors=tty, exception_formatter=structlog.dev.plain_traceback
            )
        ]
    shared = _shared_processors()
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    handler.addFilter(RepeatedLines())
    setattr(handler, _HANDLER_MARK, True)

    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: loggers made at import time pick up a later configure_logging call.
        cache_logger_on_first_use=False,
    )


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


def get_logger(name: str | None = None, **initial_values: Any) -> structlog.stdlib.BoundLogger:
    """A logger named `name` (use `__name__`), with `initial_values` bound."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name, **initial_values)
    return logger
