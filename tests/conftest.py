"""The suite's plugins: the integration tests' fixtures (tests/integration/fixtures).

pytest reads ``pytest_plugins`` only in the conftest files it loads at start-up (a conftest it
meets while collecting may not declare plugins), so they are declared here, above every test
directory, rather than in tests/integration/conftest.py.
"""

pytest_plugins = [
    "tests.integration.fixtures.broker",
    "tests.integration.fixtures.records",
    "tests.integration.fixtures.sidecars",
    "tests.integration.fixtures.private_brokers",
]
