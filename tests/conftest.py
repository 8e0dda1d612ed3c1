"""The suite's set-up: the hypothesis profile ($HYPOTHESIS_PROFILE: `fast` by default, `thorough`
for CI; tests/hypothesis_profiles.py), and the integration tests' fixtures
(tests/integration/fixtures) as plugins.

pytest reads ``pytest_plugins`` only in the conftest files it loads at start-up (a conftest it
meets while collecting may not declare plugins), so they are declared here, above every test
directory, rather than in tests/integration/conftest.py.
"""

from tests.hypothesis_profiles import load_profile

load_profile()

pytest_plugins = [
    "tests.integration.fixtures.broker",
    "tests.integration.fixtures.records",
    "tests.integration.fixtures.sidecars",
    "tests.integration.fixtures.private_brokers",
    "tests.integration.fixtures.clusters",
]
