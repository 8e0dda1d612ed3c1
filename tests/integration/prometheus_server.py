"""A real Prometheus (Debian's package) for the integration tests: deploy/prometheus/prometheus.yml
with the sidecars' metrics ports as the targets of job `zdict-sidecar`, relabelled as the
Prometheus Operator relabels a ServiceMonitor's targets, 1 s scrapes and rule evaluations, the
real rule files, its own storage directory and port."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from .process import free_port
from .waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
JOB = "zdict-sidecar"
#: The Kubernetes namespace the relabelling below gives every sidecar target.
K8S_NAMESPACE = "zdict-it"
#: What the Prometheus Operator's relabelling of a ServiceMonitor's endpoints puts on every
#: target, here from static targets: the pod from the port, the rest constant.
OPERATOR_RELABELLING = [
    {"target_label": "namespace", "replacement": K8S_NAMESPACE},
    {"target_label": "service", "replacement": "orders-producer-zdict-metrics"},
    {"target_label": "container", "replacement": "zdict-sidecar"},
    {"target_label": "endpoint", "replacement": "metrics"},
    {
        "source_labels": ["__address__"],
        "regex": r"127\.0\.0\.1:(\d+)",
        "target_label": "pod",
        "replacement": "orders-producer-$1",
    },
]


class PrometheusServer:
    """A real Prometheus process on a free loopback port, with its own storage directory."""

    def __init__(self, work_dir: Path, sidecar_ports: list[int]) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not installed: run `make tools` (Debian package prometheus)"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = work_dir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(self.config(sidecar_ports)))
        self.log_path = work_dir / "prometheus.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={work_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def config(self, sidecar_ports: list[int]) -> dict[str, Any]:
        """deploy/prometheus/prometheus.yml with local targets relabelled as the Prometheus
        Operator does, 1 s intervals, absolute rules."""
        config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
        config["global"].update(
            {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
        )
        config["rule_files"] = [str(PROMETHEUS_DIR / name) for name in config["rule_files"]]
        targets = {
            JOB: [f"127.0.0.1:{port}" for port in sidecar_ports],
            "prometheus": [f"127.0.0.1:{self.port}"],
        }
        assert {job["job_name"] for job in config["scrape_configs"]} == set(targets)
        for job in config["scrape_configs"]:
            job["static_configs"] = [{"targets": targets[job["job_name"]]}]
            if job["job_name"] == JOB:
                assert not job.get("honor_labels"), "the Operator's default: honorLabels off"
                job["relabel_configs"] = OPERATOR_RELABELLING
        return config

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log_tail()}"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    return int(response.status) == 200
            except OSError:
                return False

        wait_until(ready, timeout, "prometheus to be ready", interval=0.2)

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the whole JSON body, whatever its status."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:  # 400/422: a query Prometheus refused
            return json.load(exc)

    def query(self, expr: str, at: float | None = None) -> Any:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("query", **params)

    def result(self, expr: str) -> list[Any]:
        body = self.query(expr)
        assert body["status"] == "success", (expr, body)
        result: list[Any] = body["data"]["result"]
        return result

    def log_tail(self) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
