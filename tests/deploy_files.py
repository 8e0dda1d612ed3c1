"""Readers for the deployment files the tests check: the Dockerfile, and setting names.

* `parse_dockerfile` splits a Dockerfile into stages of (instruction, arguments), continuation
  lines joined and comments dropped, `ARG` defaults substituted into `FROM`;
* `env_pairs` reads the `KEY=VALUE` pairs of an `ENV` instruction;
* `build_go_tool` builds one of the checkers of deploy/tools (compose-go, the Prometheus
  Operator's types) with the Go toolchain, modules from the Go module proxy;
* `is_setting` tells whether an environment variable name is one zdict-sidecar reads: a field of
  `sidecar.config.Settings` (ZDICT_ + the field path joined by `__`), a librdkafka property
  passed through (ZDICT_KAFKA__*, ZDICT_CONSUMER__*, ZDICT_PRODUCER__*), or
  KAFKA_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pydantic import BaseModel

from sidecar.config import ENV_DELIMITER, ENV_PREFIX, KafkaSettings, Settings

TOOLS = Path(__file__).resolve().parents[1] / "deploy" / "tools"

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
        nested = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if nested and annotation is not KafkaSettings:  # Kafka properties are free-form
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


def build_go_tool(name: str, out_dir: Path) -> Path:
    """`go build` deploy/tools/<name> into `out_dir`; the binary (about 30 s the first time on
    a machine, while the modules download; seconds after)."""
    go = shutil.which("go")
    assert go, "Go is not installed: the checkers in deploy/tools need it"
    binary = out_dir / name
    result = subprocess.run(
        [go, "build", "-o", str(binary), f"./{name}"],
        cwd=TOOLS,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return binary
