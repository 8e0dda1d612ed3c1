"""Every test under tests/integration is marked ``integration``: it needs a real Kafka broker.

Their fixtures are the plugins of tests/integration/fixtures, loaded by tests/conftest.py
(pytest reads ``pytest_plugins`` only in a conftest it loads at start-up).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected under tests/integration with ``pytest.mark.integration``.

    The hook sees all collected items of the session, so it filters by path.
    """
    for item in items:
        if Path(item.path).resolve().is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)
