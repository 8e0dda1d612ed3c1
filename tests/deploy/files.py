"""Readers for the deployment files the tests check: the Dockerfile, and setting names.

* `parse_dockerfile` splits a Dockerfile into stages of (instruction, arguments), continuation
  lines joined and comments dropped, `ARG` defaults substituted into `FROM`;
* `env_pairs` reads the `KEY=VALUE` pairs of an `ENV` instruction;
* `load_compose` parses a Compose file with compose-spec (PyPI; Python bindings of the Rust
  `compose_spec` crate, a strict reader of the Compose Specification), adds the checks between
  services that it does not make, and normalises the short syntax (see its docstring);
* `compose_config` runs the real `docker compose config` (the Docker CLI's Compose plugin, no
  engine needed) on a project's files, and `drop_in` copies deploy/compose/proxy-sidecar.yml
  into a project with the user's service named in its one place;
* `is_setting` tells whether an environment variable name is one zdict-sidecar reads: a field of
  `sidecar.config.Settings` (ZDICT_ + the field path joined by `__`), a librdkafka property
  passed through (ZDICT_KAFKA__*, ZDICT_CONSUMER__*, ZDICT_PRODUCER__*), or
  KAFKA_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from compose_spec import PyOptions
from pydantic import BaseModel

from sidecar.config import ENV_DELIMITER, ENV_PREFIX, KafkaSettings, Settings

#: Read by `KafkaSettings.client_config` when no bootstrap.servers setting is given.
PLAIN_VARIABLES = frozenset({"KAFKA_BOOTSTRAP_SERVERS"})


@dataclass
class Stage:
    """One `FROM` ... section of a Dockerfile."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        """The arguments of every `keyword` instruction, in order."""
        return [args for kw, args in self.instructions if kw == keyword]

    def one(self, keyword: str) -> str:
        found = self.all(keyword)
        assert len(found) == 1, f"expected one {keyword} in stage {self.name or self.base}"
        return found[0]


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def parse_dockerfile(text: str) -> list[Stage]:
    """The stages of a Dockerfile (see the module docstring)."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in _logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], rest)
            parts = image.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif keyword == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
        elif stages:
            stages[-1].instructions.append((keyword, rest))
    return stages


def env_pairs(args: str) -> dict[str, str]:
    """`K1=v1 K2="v 2"` → {"K1": "v1", "K2": "v 2"} (the `ENV key=value` form only)."""
    pairs: dict[str, str] = {}
    for token in shlex.split(args):
        key, sep, value = token.partition("=")
        assert sep, f"ENV {args!r}: use the KEY=VALUE form"
        pairs[key] = value
    return pairs


def _paths(model: type[BaseModel], prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        paths.add(path)
        annotation = info.annotation
        if (
            isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
            and annotation is not KafkaSettings  # Kafka properties are free-form
        ):
            paths |= _paths(annotation, path)
    return paths


@cache
def _setting_names() -> tuple[frozenset[str], tuple[str, ...]]:
    names = frozenset(
        ENV_PREFIX + ENV_DELIMITER.join(part.upper() for part in path)
        for path in _paths(Settings, ())
    )
    pass_through = tuple(
        f"{ENV_PREFIX}{name.upper()}{ENV_DELIMITER}"
        for name, info in Settings.model_fields.items()
        if info.annotation is KafkaSettings
    )
    return names, pass_through


def is_setting(name: str) -> bool:
    """True when zdict-sidecar reads the environment variable `name` (module docstring)."""
    names, pass_through = _setting_names()
    return name in names or name in PLAIN_VARIABLES or name.startswith(pass_through)


# -- Compose -------------------------------------------------------------------------------------


class ComposeError(ValueError):
    """A Compose file that compose-spec refuses, or whose services refer to what is not there."""


#: The Compose drop-in, and the line of it where the user writes their service's name.
COMPOSE_DROP_IN = Path(__file__).resolve().parents[2] / "deploy" / "compose" / "proxy-sidecar.yml"
DROP_IN_SERVICE_LINE = "  app: # your service's name, the one place it is written\n"


def drop_in(project: Path, service: str) -> Path:
    """The drop-in copied into `project` (beside the user's compose file, as its comment says)
    with `service` written in its one place; its path."""
    text = COMPOSE_DROP_IN.read_text()
    assert text.count(DROP_IN_SERVICE_LINE) == 1
    path = project / COMPOSE_DROP_IN.name
    path.write_text(text.replace(DROP_IN_SERVICE_LINE, f"  {service}:\n"))
    return path


def compose_config(project: Path, *files: str) -> dict[str, Any]:
    """`docker compose -f FILE ... config` of `files` in `project`: the merged project, as JSON.
    Only the project's own variables are interpolated (none of this machine's ZDICT_*)."""
    docker = shutil.which("docker")
    assert docker, "the Docker CLI is not installed"
    args = [arg for name in files for arg in ("-f", str(project / name))]
    result = subprocess.run(
        [docker, "compose", *args, "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert result.returncode == 0, "`docker compose config` (make tools): " + result.stderr
    merged: dict[str, Any] = json.loads(result.stdout)
    return merged


#: A short-syntax volume source starting like this is a host path (a bind mount).
_HOST_PATH = (".", "/", "~")


def load_compose(path: Path) -> dict[str, Any]:
    """`path` parsed strictly, checked across services, and normalised.

    compose-spec (with YAML merge keys applied, as `docker compose` does) refuses anything the
    Compose Specification does not define: an unknown key (extensions must start with `x-`), an
    enum value it does not know (`depends_on` conditions, `restart`), a malformed duration or
    port, a value of the wrong type. It does not check references between services, so this
    function does, as `docker compose` does: every `depends_on` names a service, every named
    volume is declared under the top-level `volumes`. Variables (`$VAR`) are refused:
    compose-spec does not interpolate them, so what it parsed would not be what `docker compose`
    runs.

    The result is compose-spec's data with the short syntax written out in the long form that
    `docker compose config` prints: `build` {context (absolute), dockerfile}; `ports` [{published,
    target, protocol, host_ip?}]; `volumes` [{type bind|volume, source (absolute for binds),
    target, read_only}]; `depends_on` {service: {condition}}; `environment` {name: str};
    a string `command` split like a shell; a string healthcheck `test` as CMD-SHELL.

    Raises:
        ComposeError: naming what compose-spec refused or the broken reference.
    """
    text = path.read_text()
    if "$" in text:
        raise ComposeError(f"{path}: variables ($) are not interpolated by this check")
    try:
        compose = PyOptions(apply_merge=True).from_yaml(text)
        compose.validate()
    except ValueError as exc:
        raise ComposeError(f"{path}: {exc}") from None
    project = compose.to_dict()
    base = path.resolve().parent
    services: dict[str, Any] = project.get("services") or {}
    declared_volumes = set(project.get("volumes") or {})
    problems: list[str] = []
    for name, service in services.items():
        _normalise_service(service, base)
        problems += [
            f"service {name} depends on undefined service {other}"
            for other in service.get("depends_on", {})
            if other not in services
        ]
        named = [v.get("source") for v in service.get("volumes", []) if v["type"] == "volume"]
        problems += [
            f"service {name} uses undeclared volume {source}"
            for source in named
            if source and source not in declared_volumes
        ]
    if problems:
        raise ComposeError(f"{path}: " + "; ".join(problems))
    return project


def _normalise_service(service: dict[str, Any], base: Path) -> None:
    build = service.get("build")
    if build is not None:
        build = {"context": build} if isinstance(build, str) else dict(build)
        build["context"] = str((base / build.get("context", ".")).resolve())
        build.setdefault("dockerfile", "Dockerfile")
        service["build"] = build
    if "ports" in service:
        service["ports"] = [_port(port) for port in service["ports"]]
    if "volumes" in service:
        service["volumes"] = [_volume(volume, base) for volume in service["volumes"]]
    depends_on = service.get("depends_on")
    if isinstance(depends_on, list):
        service["depends_on"] = {name: {"condition": "service_started"} for name in depends_on}
    environment = service.get("environment")
    if isinstance(environment, list):
        environment = dict(item.partition("=")[::2] for item in environment)
    if environment is not None:
        service["environment"] = {
            key: "" if value is None else str(value) for key, value in environment.items()
        }
    if isinstance(service.get("command"), str):
        service["command"] = shlex.split(service["command"])
    healthcheck = service.get("healthcheck")
    if healthcheck is not None and isinstance(healthcheck.get("test"), str):
        healthcheck["test"] = ["CMD-SHELL", healthcheck["test"]]


def _port(port: int | str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(port, dict):
        return {"protocol": "tcp", **port}
    spec, _, protocol = str(port).partition("/")
    host_ip = None
    if spec.startswith("["):  # an IPv6 address: [::1]:PUBLISHED:TARGET
        address, _, spec = spec[1:].partition("]:")
        host_ip = address
    parts = spec.split(":")
    if len(parts) == 3 and host_ip is None:
        host_ip = parts.pop(0)
    if not 1 <= len(parts) <= 2 or not all(part.isdigit() for part in parts):
        raise ComposeError(f"port {port!r}: only [HOST_IP:][PUBLISHED:]TARGET[/PROTOCOL] is read")
    short: dict[str, Any] = {"target": int(parts[-1]), "protocol": protocol or "tcp"}
    if len(parts) == 2:
        short["published"] = int(parts[0])
    if host_ip is not None:
        short["host_ip"] = host_ip
    return short


def _volume(volume: str | dict[str, Any], base: Path) -> dict[str, Any]:
    if isinstance(volume, dict):
        long = dict(volume)
        long.setdefault("read_only", False)
    else:
        source, _, rest = volume.partition(":")
        if not rest:  # only a target: an anonymous volume
            return {"type": "volume", "target": source, "read_only": False}
        target, _, mode = rest.partition(":")
        kind = "bind" if source.startswith(_HOST_PATH) else "volume"
        long = {
            "type": kind,
            "source": source,
            "target": target,
            "read_only": "ro" in mode.split(","),
        }
    if long["type"] == "bind":
        long["source"] = str((base / Path(long["source"]).expanduser()).resolve())
    return long
