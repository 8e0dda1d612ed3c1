"""Generate the Grafana dashboard and the Kubernetes PrometheusRule: `make dashboard`.

Writes, from this code and deploy/prometheus/{rules,alerts}.yml:

* deploy/grafana/dashboards/zdict-sidecar.json: the dashboard (uid `zdict-sidecar`, every query
  on the data source variable `${datasource}`);
* deploy/k8s/prometheusrule.yaml: the same recording and alert rules for prometheus-operator;
* deploy/k8s/grafana-dashboard.yaml: the dashboard as a ConfigMap labelled
  `grafana_dashboard: "1"`, which kube-prometheus-stack's Grafana loads.

Both outputs are committed; the tests compare them with what this package generates, so edit
its code (or the rule files) and run `make dashboard` (``python -m deploy.monitoring``), never
the outputs. ``python -m deploy.monitoring --check`` exits 1 when a committed output differs.

Modules: `queries` (the PromQL), `widgets` (Grafana panel types and the grid layout), `rows`
(the panels, row by row), `dashboard` (annotations, variables, the JSON model),
`prometheus_rule` (the rule files as one resource), `grafana_configmap` (the dashboard's
ConfigMap); `__main__` writes or checks the outputs.
"""

from __future__ import annotations

from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[1]
"""The deploy/ folder: the rule files are read from it, the outputs written to it."""
DASHBOARD_PATH = DEPLOY / "grafana" / "dashboards" / "zdict-sidecar.json"
PROMETHEUS_RULE_PATH = DEPLOY / "k8s" / "prometheusrule.yaml"
GRAFANA_CONFIGMAP_PATH = DEPLOY / "k8s" / "grafana-dashboard.yaml"
RULE_FILES = (DEPLOY / "prometheus" / "rules.yml", DEPLOY / "prometheus" / "alerts.yml")
