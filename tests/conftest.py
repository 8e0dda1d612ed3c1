"""The suite's set-up: the hypothesis profile ($HYPOTHESIS_PROFILE: `fast` by default, `thorough`
for CI; tests/hypothesis_profiles.py), the integration tests' fixtures
(tests/integration/fixtures) as plugins, a refusal to run on compiled modules older than their
sources, and with ZDICT_PURE_PYTHON set, those modules imported from their sources (the package
itself does that as it is imported: sidecar/compiled.py).

pytest reads ``pytest_plugins`` only in the conftest files it loads at start-up (a conftest it
meets while collecting may not declare plugins), so they are declared here, above every test
directory, rather than in tests/integration/conftest.py.
"""

import pytest

from tests.compiled import stale_extensions
from tests.hypothesis_profiles import load_profile

load_profile()


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_extensions()
    if stale:
        pytest.exit(
            f"{', '.join(stale)} changed after mypyc compiled it: the tests would run the old "
            "compiled module; build again with `make .venv/.installed-stamp` (or "
            "`.venv/bin/pip install --no-deps -e .`)",
            returncode=4,
        )


pytest_plugins = [
    "tests.integration.fixtures.broker",
    "tests.integration.fixtures.records",
    "tests.integration.fixtures.sidecars",
    "tests.integration.fixtures.private_brokers",
    "tests.integration.fixtures.clusters",
]
