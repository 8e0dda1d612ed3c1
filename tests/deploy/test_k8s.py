"""deploy/k8s: schema-valid, wired together, and configured only with settings that exist.

Checks that run for real: kubernetes-validate (PyPI; it ships the Kubernetes OpenAPI schemas,
so it works offline) validates every built-in kind strictly against Kubernetes 1.29 and 1.37;
ServiceMonitor and PrometheusRule are decoded into strict pydantic models of the Prometheus
Operator's API (tests/deploy/operator_types.py: unknown fields, wrong types, enums and duration
patterns refused), and the PrometheusRule's groups are checked by the real `promtool check
rules`. The ConfigMap (generated from zdict-sidecar.env) and the Secret are loaded by
sidecar.config as the pods' environment, and the CronJob's arguments are parsed by the real CLI
parser. The kustomization is rendered by the real kustomize (`kubectl kustomize`,
tests/deploy/kustomize.py). No cluster and no operator run here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from sidecar.cli.dicts import configured_topics
from sidecar.cli.main import build_parser
from sidecar.config import load_settings
from sidecar.health import Health
from tests.deploy.files import is_setting
from tests.deploy.kustomize import generated, render
from tests.deploy.operator_types import PrometheusRule, ServiceMonitor, decode

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BUILT_IN = (
    "secret.yaml",
    "deployment.yaml",
    "pdb.yaml",
    "service.yaml",
    "pvc.yaml",
)
CRONJOB = "cronjob-train.yaml"
OPERATOR = ("servicemonitor.yaml", "prometheusrule.yaml")
#: Flags the retraining CronJob uses that the lifecycle work adds to `train` (the registry);
#: once the parser knows one, it is parsed like any other.
PENDING_TRAIN_FLAGS = ("--publish",)


def _doc(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((K8S / name).read_text())
    return loaded


def _config() -> dict[str, str]:
    """The settings ConfigMap's data, as kustomize generates it from zdict-sidecar.env."""
    data: dict[str, str] = generated(render(K8S), "ConfigMap", _config_name())["data"]
    return data


def _config_name() -> str:
    (generator,) = _doc("kustomization.yaml")["configMapGenerator"]
    name: str = generator["name"]
    return name


def _resources() -> dict[str, dict[str, Any]]:
    kustomization = _doc("kustomization.yaml")
    return {name: _doc(name) for name in kustomization["resources"]}


def _zdict_containers() -> list[tuple[str, dict[str, Any]]]:
    deployment = _doc("deployment.yaml")["spec"]["template"]["spec"]
    cronjob = _doc(CRONJOB)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return [
        (f"{source}/{c['name']}", c)
        for source, pod in (("deployment", deployment), ("cronjob", cronjob))
        for c in pod["containers"]
        if "zdict-sidecar" in c["image"]
    ]


def test_kustomization_lists_every_manifest_but_the_secret_and_each_has_kind_and_name() -> None:
    listed = set(_doc("kustomization.yaml")["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    # Listed, the placeholder Secret would overwrite the one created by hand at every apply.
    assert listed == on_disk - {"secret.yaml"}
    for name, resource in _resources().items():
        assert resource["apiVersion"] and resource["kind"], name
        assert resource["metadata"]["name"], name


@pytest.mark.parametrize("version", ["1.29.0", "1.37.0"])
def test_kubernetes_validate_accepts_every_built_in_kind_strictly(version: str) -> None:
    tool = shutil.which("kubernetes-validate", path=str(Path(sys.executable).parent))
    assert tool, "kubernetes-validate is not installed: `pip install -e '.[dev]'`"
    files = [str(K8S / name) for name in (*BUILT_IN, CRONJOB)]
    result = subprocess.run(
        [tool, "--strict", "--kubernetes-version", version, *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" passed ") + result.stderr.count(" passed ") == len(files)


def test_the_operator_resources_decode_strictly_into_models_of_the_operators_api() -> None:
    monitor, rule = (decode(_doc(name)) for name in OPERATOR)
    assert isinstance(monitor, ServiceMonitor) and isinstance(rule, PrometheusRule)
    assert monitor.spec.jobLabel and monitor.spec.endpoints[0].interval == "15s"
    assert {group.name for group in rule.spec.groups} == {
        "zdict-sidecar.records",
        "zdict-sidecar.alerts",
    }


@pytest.mark.parametrize(
    ("name", "old", "new", "complaint"),
    [
        ("servicemonitor.yaml", "jobLabel", "jobLable", "jobLable"),
        ("servicemonitor.yaml", "interval: 15s", "interval: 15 seconds", "pattern"),
        ("servicemonitor.yaml", "      path: /metrics", "      path: 9400", "string"),
        ("prometheusrule.yaml", "    for: 2m", "    for: 2", "for"),
        (
            "prometheusrule.yaml",
            "    - alert: ZdictSidecarDown",
            "    - alrt: ZdictSidecarDown",
            "alrt",
        ),
    ],
)
def test_a_misspelt_or_mistyped_operator_field_is_refused(
    name: str, old: str, new: str, complaint: str
) -> None:
    text = (K8S / name).read_text()
    assert old in text
    with pytest.raises(ValueError, match=complaint):
        decode(yaml.safe_load(text.replace(old, new)))


def _promtool_check_rules(groups: list[Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make tools` (Debian package prometheus)"
    rules = tmp_path / "prometheusrule-groups.yml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return subprocess.run(
        [promtool, "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_promtool_accepts_the_prometheus_rules_groups_as_a_rules_file(tmp_path: Path) -> None:
    groups = _doc("prometheusrule.yaml")["spec"]["groups"]
    result = _promtool_check_rules(groups, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = sum(len(group["rules"]) for group in groups)
    assert f"SUCCESS: {rules} rules found" in result.stdout


def test_promtool_refuses_a_prometheus_rule_whose_expression_does_not_parse(
    tmp_path: Path,
) -> None:
    resource = _doc("prometheusrule.yaml")
    resource["spec"]["groups"][0]["rules"][0]["expr"] = "sum(rate(zdict_input_bytes_total[5m]) by"
    decode(resource)  # the operator's types take any string: only promtool parses PromQL
    result = _promtool_check_rules(resource["spec"]["groups"], tmp_path)
    assert result.returncode != 0
    assert "parse error" in result.stdout + result.stderr


def test_the_pod_runs_the_producer_and_the_sidecar_with_probes_and_resources() -> None:
    pod = _doc("deployment.yaml")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 2
    (_, sidecar), _cron = _zdict_containers()
    assert sidecar["args"] == ["run"]
    (port,) = sidecar["ports"]
    assert port["name"] == "metrics"
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    for container in pod["containers"]:
        assert container["image"], container["name"]
        resources = container["resources"]
        assert resources["requests"]["cpu"] and resources["limits"]["memory"], container["name"]


def test_every_container_runs_non_root_on_a_read_only_root_filesystem() -> None:
    pods = [
        _doc("deployment.yaml")["spec"]["template"]["spec"],
        _doc(CRONJOB)["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    ]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] >= 1000
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, container["name"]
            assert context["allowPrivilegeEscalation"] is False, container["name"]
            assert context["capabilities"]["drop"] == ["ALL"], container["name"]


def test_the_dictionary_store_is_a_writable_volume_in_every_zdict_container() -> None:
    store = _config()["ZDICT_DICTIONARIES"]
    pods = {
        "deployment": _doc("deployment.yaml")["spec"]["template"]["spec"],
        "cronjob": _doc(CRONJOB)["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    }
    for name, container in _zdict_containers():
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert store in mounts and not mounts[store].get("readOnly"), name
        volumes = {v["name"]: v for v in pods[name.split("/")[0]]["volumes"]}
        volume = volumes[mounts[store]["name"]]
        assert "emptyDir" in volume or "persistentVolumeClaim" in volume, name
    claim = pods["cronjob"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert claim == _doc("pvc.yaml")["metadata"]["name"]


def test_zdict_containers_take_their_environment_from_the_configmap_and_the_secret() -> None:
    names = {r["kind"]: r["metadata"]["name"] for r in _resources().values()}
    names["ConfigMap"] = _config_name()
    names["Secret"] = _doc("secret.yaml")["metadata"]["name"]
    for name, container in _zdict_containers():
        sources = container["envFrom"]
        assert {"configMapRef": {"name": names["ConfigMap"]}} in sources, name
        assert {"secretRef": {"name": names["Secret"]}} in sources, name
        for variable in container.get("env", []):
            assert is_setting(variable["name"]), (name, variable["name"])


def test_every_configmap_and_secret_key_is_a_setting_zdict_sidecar_reads() -> None:
    keys = [*_config(), *_doc("secret.yaml")["stringData"]]
    unknown = [key for key in keys if not is_setting(key)]
    assert unknown == []
    assert not is_setting("ZDICT_RELAY__INPUT_TOPIC")  # a typo is caught: the field is plural


def test_the_configmap_and_secret_load_as_valid_settings_with_the_password_kept_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in [k for k in os.environ if k.startswith("ZDICT_")]:
        monkeypatch.delenv(key)
    environment = {**_config(), **_doc("secret.yaml")["stringData"]}
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.relay.input_topics == ("orders",)
    assert configured_topics(settings) == ["orders"]  # what the CronJob trains
    assert str(settings.dictionaries) == environment["ZDICT_DICTIONARIES"]
    properties = settings.kafka.properties
    assert properties["security.protocol"] == "SASL_SSL"
    assert isinstance(properties["sasl.password"], SecretStr)
    assert (
        settings.kafka.client_config()["bootstrap.servers"]
        == (environment["KAFKA_BOOTSTRAP_SERVERS"])
    )


def test_the_service_selects_the_pods_and_the_servicemonitor_scrapes_it_as_job_zdict_sidecar() -> (
    None
):
    deployment = _doc("deployment.yaml")
    service = _doc("service.yaml")
    monitor = _doc("servicemonitor.yaml")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    (_, sidecar), _cron = _zdict_containers()
    # A number, resolved on every Kubernetes version (the proxy's port is an init container's).
    assert port["targetPort"] == sidecar["ports"][0]["containerPort"] == 9400
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"]
    # was: instance = the pod's IP and port, in every legend and alert (issue 28, point 9)
    assert {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "instance"} in (
        endpoint["relabelings"]
    )
    # The job label the alerts select on (deploy/prometheus/alerts.yml: job="zdict-sidecar").
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "zdict-sidecar"


def test_the_cronjob_retrains_every_relayed_topic_on_a_schedule_with_the_real_cli() -> None:
    spec = _doc(CRONJOB)["spec"]
    assert len(spec["schedule"].split()) == 5
    assert spec["concurrencyPolicy"] == "Forbid"
    # As rendered: the topic is set from the settings (kustomization.yaml's replacements).
    (cronjob,) = [r for (kind, _), r in render(K8S).items() if kind == "CronJob"]
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "train" and "--publish" in args
    # Until the lifecycle work is merged, `train` does not know --publish: it may be left over.
    parsed, unknown = build_parser().parse_known_args(args)
    assert set(unknown) <= set(PENDING_TRAIN_FLAGS), unknown
    assert parsed.func.__name__ == "cmd_train"
    # was: `--topic` the first of ZDICT_RELAY__INPUT_TOPICS, the others never retrained.
    assert parsed.configured_topics and parsed.topic is None
    assert parsed.sample == 20_000


def test_the_operator_resources_carry_the_release_label_kube_prometheus_stack_selects_on() -> None:
    resources = {kind: resource for (kind, _), resource in render(K8S).items()}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        labels = resources[kind]["metadata"]["labels"]
        assert labels["release"] == "kube-prometheus-stack", kind
        assert labels["app.kubernetes.io/name"] == "zdict-sidecar", kind
        decode(resources[kind])  # still a valid resource of the Operator's API
    others = [kind for kind, r in resources.items() if "release" in r["metadata"].get("labels", {})]
    assert sorted(others) == ["PrometheusRule", "ServiceMonitor"]
    # The files themselves stay without it: the name is set in one place.
    assert "release" not in _doc("servicemonitor.yaml")["metadata"]["labels"]


def test_readiness_does_not_depend_on_the_consumer_groups_assignment() -> None:
    """The sidecar's /readyz is the pod's readiness: with more pods than partitions, or a surge
    pod during a rollout, a sidecar holding no partition must not keep the producer out."""
    health = Health()
    health.set_encoder_ready()
    assert health.readiness() == (True, "ready")  # no partition was ever assigned
    (_, sidecar), _cron = _zdict_containers()
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
