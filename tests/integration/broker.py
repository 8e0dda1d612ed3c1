"""The session's test broker: the variable that names it and how long to wait for it.

The broker is started outside pytest by ``deploy/kafka/kafka-local``: ``make test`` runs
``deploy/kafka/kafka-local exec -- .venv/bin/pytest ...``, which exports KAFKA_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
HOW_TO_RUN = (
    "run the integration tests via `make test` or "
    "`deploy/kafka/kafka-local exec -- .venv/bin/pytest tests/integration`"
)
BROKER_TIMEOUT_S = 15.0
TOPIC_TIMEOUT_S = 30.0
