"""deploy/acls.py: the ACLs per role, the commands it prints and the table deploy/README.md holds.

Whether the grants are enough is checked against an authorizing broker by
tests/integration/test_acls.py; these tests check their form, without a broker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.acls import DEFAULT_REGISTRY, ROLES, acl_arguments, main, markdown

ROOT = Path(__file__).resolve().parents[2]

#: The operations Kafka accepts on each resource type (AclCommand refuses any other).
VALID_OPERATIONS = {
    "topic": {
        "Read",
        "Write",
        "Create",
        "Delete",
        "Alter",
        "Describe",
        "DescribeConfigs",
        "AlterConfigs",
    },
    "group": {"Read", "Describe", "Delete"},
    "transactional-id": {"Describe", "Write"},
}


def test_the_readme_holds_the_table_of_every_roles_grants() -> None:
    assert markdown() in (ROOT / "deploy" / "README.md").read_text()


def test_every_grant_names_operations_its_resource_takes_and_a_documented_key() -> None:
    for name, role in ROLES.items():
        for grant in role.grants:
            assert set(grant.operations) <= VALID_OPERATIONS[grant.resource], (name, grant)
            assert grant.key is None or grant.key in role.keys, (name, grant)


def test_the_relays_commands_grant_exactly_what_it_needs_by_default() -> None:
    values = {"input": ["orders", "clicks"], "output": ["orders.zd", "clicks.zd"], "group": ["g"]}
    add = "--add --allow-principal User:relay"
    assert [" ".join(c) for c in acl_arguments("relay", "User:relay", values)] == [
        f"{add} --operation Read --operation Describe --operation Write --topic {DEFAULT_REGISTRY} "
        f"--topic {DEFAULT_REGISTRY}-index",
        f"{add} --operation Read --operation Describe --topic orders --topic clicks",
        f"{add} --operation Write --operation Describe --operation DescribeConfigs "
        "--topic orders.zd --topic clicks.zd",
        f"{add} --operation Read --group g",
        f"{add} --operation Describe --group zdict- --resource-pattern-type prefixed",
    ]


def test_a_condition_adds_its_grants_only() -> None:
    values = {"input": ["o"], "output": ["o.zd"], "group": ["g"], "transactional_prefix": ["z-g-"]}
    plain = acl_arguments("relay", "User:r", values)
    exactly_once = acl_arguments("relay", "User:r", values, ["exactly-once"])
    (added,) = [command for command in exactly_once if command not in plain]
    assert added[-4:] == ["--transactional-id", "z-g-", "--resource-pattern-type", "prefixed"]
    assert added.count("--operation") == 2


@pytest.mark.parametrize(
    ("role", "values", "conditions", "message"),
    [
        ("relay", {"input": ["o"], "group": ["g"]}, (), "--set output=NAME is needed"),
        ("relay", {"inputs": ["o"]}, (), "--set inputs: role relay knows registry, input"),
        ("trainer", {"input": ["o"]}, ("training",), "--with training: role trainer knows none"),
        ("producer", {}, (), "unknown role 'producer': one of relay, trainer"),
        ("relay", {"input": ["o"], "output": ["o.zd"], "group": ["g"]}, ("dead-letters",), "dead"),
    ],
)
def test_a_missing_or_unknown_name_is_refused_naming_it(
    role: str, values: dict[str, list[str]], conditions: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        acl_arguments(role, "User:x", values, conditions)


def test_the_command_prints_kafka_acls_lines_and_refuses_bad_input_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["trainer", "--principal", "User:cron", "--set", "input=orders"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert all(line.startswith('kafka-acls.sh --bootstrap-server "$BOOTSTRAP"') for line in lines)
    assert lines[1].endswith(
        "--add --allow-principal User:cron --operation Read --operation Describe --topic orders"
    )
    assert main(["trainer", "--principal", "User:cron"]) == 2
    assert "--set input=NAME is needed: each topic it trains" in capsys.readouterr().err
    assert main(["trainer", "--principal", "User:cron", "--set", "input"]) == 2
    assert "--set input: expected KEY=NAME" in capsys.readouterr().err
    assert main(["--markdown"]) == 0
    assert capsys.readouterr().out == markdown()
