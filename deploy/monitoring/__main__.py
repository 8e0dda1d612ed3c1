"""`python -m deploy.monitoring [--check]`: write the generated files, or check they are current."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deploy.monitoring import (
    DASHBOARD_PATH,
    DEPLOY,
    GRAFANA_CONFIGMAP_PATH,
    PROMETHEUS_RULE_PATH,
)
from deploy.monitoring.dashboard import dashboard_json
from deploy.monitoring.grafana_configmap import grafana_configmap_yaml
from deploy.monitoring.prometheus_rule import prometheus_rule_yaml

#: Each generated file and the function that renders it.
OUTPUTS = {
    DASHBOARD_PATH: dashboard_json,
    PROMETHEUS_RULE_PATH: prometheus_rule_yaml,
    GRAFANA_CONFIGMAP_PATH: grafana_configmap_yaml,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Write every output, or with ``--check`` only report the stale ones (exit status 1)."""
    parser = argparse.ArgumentParser(
        prog="python -m deploy.monitoring",
        description="Generate the Grafana dashboard, its ConfigMap and the PrometheusRule.",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if an output is stale")
    args = parser.parse_args(argv)
    stale = []
    for path, render in OUTPUTS.items():
        text = render()
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(DEPLOY.parent)}")
    for path in stale:
        print(f"{path.relative_to(DEPLOY.parent)} is stale: run `make dashboard`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
