"""Operator tools behind the CLI: read a topic decoded, verify a relay, evaluate, report."""
