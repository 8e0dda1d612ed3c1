"""`python -m deploy.acls ROLE --principal User:NAME --set KEY=VALUE ...`: the Kafka ACLs a role
of zdict-sidecar needs, as `kafka-acls.sh` commands (`--markdown`: the table deploy/README.md
holds).

Each role's grants come from the clients it opens: a consumer group, producers, an admin client
that describes topics and reads their settings, and assign-only readers (the registry, a training
sample) whose throwaway group `zdict-<purpose>-<uuid>` still looks its coordinator up, which
needs Describe on the group. tests/integration/test_acls.py applies the relay's, the trainer's
and the proxy's grants (without their `when` conditions) with Kafka's own AclCommand
to a broker running the StandardAuthorizer, and runs each role with nothing more.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The registry topic when ZDICT_REGISTRY__TOPIC is not set.
DEFAULT_REGISTRY = "_zdict_dictionaries"
#: The suffix of the registry's index topic, which takes the registry's grants
#: (sidecar.dictionaries.registry_state.INDEX_SUFFIX).
INDEX_SUFFIX = "-index"
#: What the throwaway groups of the assign-only readers start with (sidecar.kafka.make_reader).
READER_GROUP_PREFIX = "zdict-"
#: AclCommand's option for each resource type.
_RESOURCE_OPTION = {
    "topic": "--topic",
    "group": "--group",
    "transactional-id": "--transactional-id",
}


@dataclass(frozen=True)
class Grant:
    """Operations on one resource: `name` is a literal or a `{key}` the operator fills in (each
    value of a key gets the grant); `prefixed` grants every name that starts with it; `when`
    names the condition (a `--with` flag) without which the grant is not needed."""

    resource: str
    name: str
    operations: tuple[str, ...]
    why: str
    prefixed: bool = False
    when: str | None = None

    @property
    def key(self) -> str | None:
        """The placeholder's key (`input` for `{input}`), None for a literal name."""
        return self.name[1:-1] if self.name.startswith("{") else None


@dataclass(frozen=True)
class Role:
    command: str
    keys: Mapping[str, str]
    grants: tuple[Grant, ...]


_READERS = Grant(
    "group",
    READER_GROUP_PREFIX,
    ("Describe",),
    "assign-only readers: registry, samples (group `zdict-<purpose>-<uuid>`)",
    prefixed=True,
)

ROLES: dict[str, Role] = {
    "relay": Role(
        "`run`",
        {
            "registry": "ZDICT_REGISTRY__TOPIC",
            "input": "each of ZDICT_RELAY__INPUT_TOPICS",
            "output": "each output topic (ZDICT_RELAY__OUTPUT_TOPIC)",
            "group": "ZDICT_RELAY__GROUP_ID",
            "dead_letter": "each dead-letter topic (ZDICT_RELAY__DEAD_LETTER_TOPIC)",
            "transactional_prefix": "`zdict-<ZDICT_RELAY__GROUP_ID>-` "
            "(or ZDICT_RELAY__TRANSACTIONAL_ID)",
        },
        (
            Grant(
                "topic",
                "{registry}",
                ("Read", "Describe", "Write"),
                "follows the registry; publishes what it trains (Write: encode mode)",
            ),
            Grant("topic", "{input}", ("Read", "Describe"), "consumes"),
            Grant(
                "topic",
                "{output}",
                ("Write", "Describe", "DescribeConfigs"),
                "produces; reads max.message.bytes",
            ),
            Grant("group", "{group}", ("Read",), "joins, commits; elects the trainer"),
            _READERS,
            Grant(
                "topic",
                "{dead_letter}",
                ("Write", "Describe", "DescribeConfigs"),
                "produces what it cannot decode",
                when="dead-letters",
            ),
            Grant(
                "transactional-id",
                "{transactional_prefix}",
                ("Write", "Describe"),
                "exactly-once: its transactional.id",
                prefixed=True,
                when="exactly-once",
            ),
            Grant(
                "topic",
                "{output}",
                ("Create",),
                "creates missing outputs (ZDICT_RELAY__CREATE_TOPICS)",
                when="create-topics",
            ),
        ),
    ),
    "trainer": Role(
        "`train --configured-topics --publish` (the retraining CronJob)",
        {
            "registry": "ZDICT_REGISTRY__TOPIC",
            "input": "each topic it trains (ZDICT_RELAY__INPUT_TOPICS, ZDICT_PROXY__TOPICS)",
        },
        (
            Grant("topic", "{registry}", ("Read", "Describe", "Write"), "reads, publishes"),
            Grant("topic", "{input}", ("Read", "Describe"), "samples each in turn"),
            _READERS,
        ),
    ),
    "proxy": Role(
        "`proxy`: upstream, every client request goes as the proxy's principal",
        {
            "registry": "ZDICT_REGISTRY__TOPIC",
            "topic": "each topic clients produce to or fetch from",
            "client_group": "each consumer group of the clients behind it",
            "proxy_group": "ZDICT_PROXY__GROUP_ID",
            "client_transactional_id": "each transactional.id of the clients behind it",
        },
        (
            Grant("topic", "{registry}", ("Read", "Describe"), "follows the registry"),
            Grant("topic", "{topic}", ("Write", "Read", "Describe"), "the clients' Produce, Fetch"),
            Grant("group", "{client_group}", ("Read",), "the clients' groups, commits"),
            _READERS,
            Grant(
                "topic",
                "{registry}",
                ("Write",),
                "publishes what it trains (without --no-training)",
                when="training",
            ),
            Grant(
                "group",
                "{proxy_group}",
                ("Read",),
                "elects the trainer (without --no-training)",
                when="training",
            ),
            Grant(
                "transactional-id",
                "{client_transactional_id}",
                ("Write", "Describe"),
                "transactional clients",
                when="transactions",
            ),
        ),
    ),
    "decoder": Role(
        "`run --mode decode`, `cat`, `sidecar.serde` consumers: besides what they consume and "
        "produce",
        {"registry": "ZDICT_REGISTRY__TOPIC"},
        (Grant("topic", "{registry}", ("Read", "Describe"), "follows the registry"), _READERS),
    ),
    "operator": Role(
        "`dicts --registry`, `dicts export`, `dicts import`, `dicts reindex`",
        {"registry": "ZDICT_REGISTRY__TOPIC"},
        (
            Grant("topic", "{registry}", ("Read", "Describe"), "lists, exports"),
            Grant(
                "topic",
                "{registry}",
                ("Write",),
                "`activate`, `rollback`, `import`",
                when="write",
            ),
            Grant(
                "topic",
                "{registry}",
                ("Create", "Delete"),
                "a restore: deletes and creates the topic",
                when="restore",
            ),
            _READERS,
        ),
    ),
}


def _names(grant: Grant, role: Role, values: Mapping[str, Sequence[str]]) -> list[str]:
    key = grant.key
    if key is None:
        return [grant.name]
    if key == "registry":
        registries = list(values.get(key, ())) or [DEFAULT_REGISTRY]
        return [name + suffix for name in registries for suffix in ("", INDEX_SUFFIX)]
    names = list(values.get(key, ()))
    if not names:
        raise ValueError(f"--set {key}=NAME is needed: {role.keys[key]}")
    return names


def acl_arguments(
    role: str, principal: str, values: Mapping[str, Sequence[str]], conditions: Sequence[str] = ()
) -> list[list[str]]:
    """AclCommand's arguments after `--bootstrap-server ...`, one `--add` per grant.

    Raises:
        ValueError: an unknown role or condition, or a key a needed grant names has no value.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    stray = sorted(set(values) - set(ROLES[role].keys))
    if stray:
        raise ValueError(f"--set {stray[0]}: role {role} knows {', '.join(ROLES[role].keys)}")
    known = {g.when for g in ROLES[role].grants if g.when is not None}
    unknown = sorted(set(conditions) - known)
    if unknown:
        raise ValueError(
            f"--with {unknown[0]}: role {role} knows {', '.join(sorted(known)) or 'none'}"
        )
    commands = []
    for grant in ROLES[role].grants:
        if grant.when is not None and grant.when not in conditions:
            continue
        command = ["--add", "--allow-principal", principal]
        for operation in grant.operations:
            command += ["--operation", operation]
        for name in _names(grant, ROLES[role], values):
            command += [_RESOURCE_OPTION[grant.resource], name]
        if grant.prefixed:
            command += ["--resource-pattern-type", "prefixed"]
        commands.append(command)
    return commands


def markdown() -> str:
    """The table of every role's grants, as deploy/README.md holds it."""
    lines = [
        "| role | resource | name | operations | why | when |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for role_name, role in ROLES.items():
        for grant in role.grants:
            key = grant.key
            name = f"`{grant.name}`" if key is None else f"{role.keys[key]}"
            if key == "registry":
                name += f" and its `{INDEX_SUFFIX}` topic"
            if grant.prefixed:
                name = f"prefix {name}"
            when = f"`--with {grant.when}`" if grant.when else "always"
            lines.append(
                f"| {role_name} | {grant.resource} | {name} | {', '.join(grant.operations)} "
                f"| {grant.why} | {when} |"
            )
    commands = [f"- **{name}**: {role.command}" for name, role in ROLES.items()]
    return "\n".join([*commands, "", *lines]) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m deploy.acls",
        description="the kafka-acls.sh commands that grant a zdict-sidecar role what it needs",
    )
    p.add_argument("role", nargs="?", choices=sorted(ROLES))
    p.add_argument("--principal", help="the role's principal, e.g. User:orders-relay")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=NAME",
        help="a name for a key of the role's grants (repeat a key for several names)",
    )
    p.add_argument(
        "--with",
        dest="conditions",
        action="append",
        default=[],
        metavar="CONDITION",
        help="include the grants of a condition (exactly-once, dead-letters, training, ...)",
    )
    p.add_argument("--markdown", action="store_true", help="print deploy/README.md's table")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.markdown:
        print(markdown(), end="")
        return 0
    if args.role is None or args.principal is None:
        print("python -m deploy.acls: give a ROLE and --principal (or --markdown)", file=sys.stderr)
        return 2
    values: dict[str, list[str]] = {}
    for pair in args.set:
        key, sep, name = pair.partition("=")
        if not sep or not name:
            print(f"python -m deploy.acls: --set {pair}: expected KEY=NAME", file=sys.stderr)
            return 2
        values.setdefault(key, []).append(name)
    try:
        commands = acl_arguments(args.role, args.principal, values, args.conditions)
    except ValueError as exc:
        print(f"python -m deploy.acls: {exc}", file=sys.stderr)
        return 2
    tool = 'kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --command-config "$ADMIN_CONFIG"'
    for command in commands:
        print(f"{tool} {shlex.join(command)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
