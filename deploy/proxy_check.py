"""`kubectl kustomize OVERLAY | python -m deploy.proxy_check`, or `docker compose -f compose.yaml -f
proxy-sidecar.yml config | python -m deploy.proxy_check`: the Kafka client SASL/TLS settings left
in containers that deploy/components/proxy-sidecar or deploy/compose/proxy-sidecar.yml points at
the proxy.

The proxy listens in plaintext on the pod's loopback and authenticates to the brokers itself; an
application that still speaks SASL or TLS to it is refused (the proxy closes the connection). The
component cannot know how your application names its settings, so this reads the rendered
Deployments (and the ConfigMaps of the same render their containers load with `envFrom`), or the
merged Compose project's services in the proxy's network namespace (their `env_file` already
read into `environment` by `docker compose config`), for the usual names: any variable whose
name contains KAFKA and SASL, SSL or SECURITY_PROTOCOL (the last unless it is PLAINTEXT). A
Compose service in the proxy's network namespace that keeps `ports` or `hostname` is named too:
Docker refuses to start it. One line per finding, exit status 1; else one line, exit status 0.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TextIO

import yaml

#: The proxy's container, as the component names it (and the Compose override its service).
PROXY_CONTAINER = "zdict-sidecar"
#: What a Compose service in another's network namespace may not keep (Docker refuses it).
_NETWORK_NAMESPACE_FIELDS = ("ports", "hostname")
_SECURITY_ADVICE = (
    "is a Kafka client SASL/TLS setting, but its bootstrap is the proxy's plaintext port: "
    "remove it (the proxy authenticates to the brokers)"
)
_KAFKA = re.compile(r"KAFKA")
_SECURITY = re.compile(r"SASL|SSL|SECURITY_PROTOCOL")


def _is_client_security(name: str, value: str | None) -> bool:
    upper = name.upper()
    if not (_KAFKA.search(upper) and _SECURITY.search(upper)):
        return False
    return not ("SECURITY_PROTOCOL" in upper and (value or "").upper() == "PLAINTEXT")


def _has_proxy(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("name") == PROXY_CONTAINER and c.get("args", [None])[0] == "proxy"
        for c in pod.get("initContainers") or []
    )


def _variables(
    container: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, str]]
) -> Iterator[tuple[str, str | None, str]]:
    """(name, value or None, where) of each variable the container sets or loads."""
    for entry in container.get("env") or []:
        yield entry["name"], entry.get("value"), "env"
    for source in container.get("envFrom") or []:
        name = (source.get("configMapRef") or {}).get("name", "")
        prefix = source.get("prefix", "")
        for key, value in config_maps.get(name, {}).items():
            yield prefix + key, value, f"envFrom ConfigMap {name}"


def _compose_findings(project: Mapping[str, Any]) -> Iterator[str]:
    """The services of a merged Compose project in the proxy's network namespace."""
    for name, service in (project.get("services") or {}).items():
        if service.get("network_mode") != f"service:{PROXY_CONTAINER}":
            continue
        for variable, value in (service.get("environment") or {}).items():
            if _is_client_security(variable, value):
                yield f"service {name}: {variable} (environment) {_SECURITY_ADVICE}"
        for field in _NETWORK_NAMESPACE_FIELDS:
            if service.get(field):
                yield (
                    f"service {name}: {field} is refused by Docker in the network namespace of "
                    f"service {PROXY_CONTAINER}: move it to service {PROXY_CONTAINER}"
                )


def findings(documents: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """One line per client SASL/TLS setting in a container the proxy serves (module docstring)."""
    docs = [doc for doc in documents if doc]
    config_maps = {
        doc["metadata"]["name"]: doc.get("data") or {}
        for doc in docs
        if doc.get("kind") == "ConfigMap"
    }
    lines: list[str] = []
    for doc in docs:
        if "services" in doc:
            lines += _compose_findings(doc)
        if doc.get("kind") != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        if not _has_proxy(pod):
            continue
        for container in [*(pod.get("initContainers") or []), *pod["containers"]]:
            if container["name"] == PROXY_CONTAINER:
                continue
            for name, value, where in _variables(container, config_maps):
                if _is_client_security(name, value):
                    lines.append(
                        f"Deployment {doc['metadata']['name']}, container {container['name']}: "
                        f"{name} ({where}) {_SECURITY_ADVICE}"
                    )
    return lines


def main(stream: TextIO = sys.stdin) -> int:
    try:
        documents = list(yaml.safe_load_all(stream))
    except yaml.YAMLError as exc:
        print(f"python -m deploy.proxy_check: the input is not YAML: {exc}", file=sys.stderr)
        return 2
    found = findings(documents)
    for line in found:
        print(line)
    if not found:
        print("python -m deploy.proxy_check: no Kafka client SASL/TLS setting next to the proxy")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
