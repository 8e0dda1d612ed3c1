"""What a client may do through `zdict-sidecar proxy` (issue 37, items 3-5 and the Metadata
bound), with raw requests built by kio against the session broker through two real proxies:
one with the defaults (admin APIs refused), one with `ZDICT_PROXY__ADMIN_APIS=forward`.

The registry topic read by id with Fetch v17 (its id learned from the broker, as an attacker
learns it from a ConsumerGroupHeartbeat assignment), subscribed to with ConsumerGroupHeartbeat,
`__consumer_offsets` read by name with Fetch v12: refused with TOPIC_AUTHORIZATION_FAILED and no
records. A ConsumerGroupHeartbeat whose regex matches the registry and another topic is assigned
the other only; OffsetFetch of every topic of a group that committed on the registry lists it
not; a classic JoinGroup subscribing to it is refused. DeleteRecords, DeleteTopics and
AlterConfigs: refused with CLUSTER_AUTHORIZATION_FAILED and left out of ApiVersions by default;
forwarded when enabled, and still refused on the registry and `__consumer_offsets`, which keep
their records and configs (read directly). A Metadata request past
`ZDICT_PROXY__MAX_METADATA_TOPICS`: answered without brokers, not forwarded. A consumer reading
by topic id reads on across a proxy restart (a restarted proxy knows no id its clients learned
before)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    ConfigResource,
)
from kio.schema.errors import ErrorCode

from tests.kafka_frames import nested, read_response, request_frame, subscription

from .forward_proxies import allowed, start_forward_proxy, start_proxy, stop_proxy
from .launch import SidecarEnv, StartSidecar
from .probe import KafkaProbe
from .process import Sidecar, free_port
from .proxy_fixtures import registry_env, sidecars
from .raw_kafka import RawClient, metadata
from .topics import create_topic

PREFIX = "zdict-it-access"
FETCH, METADATA, DELETE_TOPICS, DELETE_RECORDS, ALTER_CONFIGS = 1, 3, 20, 21, 33
API_VERSIONS, CONSUMER_GROUP_HEARTBEAT = 18, 68
OFFSET_FETCH, JOIN_GROUP = 9, 11
MAX_METADATA_TOPICS = 50
OFFSETS = "__consumer_offsets"
#: Refusals the proxies log: expected here, so not troubles at their stop.
TROUBLES = ("connection_failed", "request_refused", "upstream_response_refused")


@dataclass
class Proxies:
    refusing: str
    forwarding: str
    registry: str
    processes: tuple[Sidecar, Sidecar]
    start: StartSidecar


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str, kafka_admin: AdminClient) -> SidecarEnv:
    return registry_env(kafka_bootstrap, kafka_admin)


@pytest.fixture(scope="module")
def proxies(
    env: SidecarEnv, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxies]:
    registry = env()["ZDICT_REGISTRY__TOPIC"]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(registry, b"dictionary bytes")
    assert producer.flush(30) == 0
    # A committed offset: __consumer_offsets exists and holds a record.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{PREFIX}-group"})
    consumer.commit(offsets=[TopicPartition(registry, 0, 0)], asynchronous=False)
    consumer.close()
    with sidecars(env, tmp_path_factory.mktemp("proxy-access")) as start:
        bound = {"ZDICT_PROXY__MAX_METADATA_TOPICS": str(MAX_METADATA_TOPICS)}
        refusing, first = start_forward_proxy(start, "access-refusing", [f"{PREFIX}-*"], env=bound)
        forwarding, second = start_forward_proxy(
            start,
            "access-forwarding",
            [f"{PREFIX}-*"],
            env={"ZDICT_PROXY__ADMIN_APIS": "forward"},
        )
        yield Proxies(refusing, forwarding, registry, (first, second), start)
        for process in (first, second):
            stop_proxy(process, TROUBLES)


def call(address: str, api_key: int, version: int, **body: Any) -> Any:
    """The answer (a kio payload) to one request sent to `address`."""
    with RawClient(address) as client:
        client.send(request_frame(api_key, version, 11, **body))
        frame = client.receive()
    assert frame is not None, "answered, the connection kept"
    correlation_id, answer = read_response(api_key, version, frame)
    assert correlation_id == 11
    return answer


def topic_id(kafka_bootstrap: str, name: str) -> uuid.UUID:
    """The id of topic `name`, from the broker itself."""
    topic = nested(METADATA, 12, "MetadataRequestTopic")
    answer = call(
        kafka_bootstrap.split(",")[0],
        METADATA,
        12,
        topics=(topic(topic_id=None, name=name),),
        include_topic_authorized_operations=False,
    )
    (found,) = answer.topics
    assert found.error_code == ErrorCode.none
    return uuid.UUID(str(found.topic_id))


def fetch(address: str, version: int, topic: str | uuid.UUID) -> Any:
    """The one partition of a Fetch of partition 0 of `topic` (a name to v12, an id from v13)
    from offset 0."""
    partition = nested(FETCH, version, "FetchPartition")(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    entry = nested(FETCH, version, "FetchTopic")
    named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"topic": topic}
    answer = call(
        address,
        FETCH,
        version,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        topics=(entry(**named, partitions=(partition,)),),
        forgotten_topics_data=(),
    )
    assert answer.error_code == ErrorCode.none
    ((found,),) = [t.partitions for t in answer.responses]
    return found


def test_the_registry_fetched_by_id_is_refused(proxies: Proxies, kafka_bootstrap: str) -> None:
    registry_id = topic_id(kafka_bootstrap, proxies.registry)
    direct = fetch(kafka_bootstrap.split(",")[0], 17, registry_id)
    assert direct.error_code == ErrorCode.none and direct.records, "the broker has records"
    for address in (proxies.refusing, proxies.forwarding):
        got = fetch(address, 17, registry_id)
        assert got.error_code == ErrorCode.topic_authorization_failed
        assert not got.records


def test_subscribing_to_the_registry_with_consumer_group_heartbeat_is_refused(
    proxies: Proxies,
) -> None:
    answer = call(
        proxies.refusing,
        CONSUMER_GROUP_HEARTBEAT,
        1,
        group_id=f"{PREFIX}-{uuid.uuid4().hex}",
        member_id=uuid.uuid4().hex[:22],
        member_epoch=0,
        rebalance_timeout=datetime.timedelta(seconds=30),
        subscribed_topic_names=(proxies.registry,),
        topic_partitions=(),
    )
    assert answer.error_code == ErrorCode.topic_authorization_failed
    assert answer.assignment is None


def test_a_heartbeat_regex_matching_the_registry_is_assigned_the_other_topics_only(
    proxies: Proxies, kafka_bootstrap: str, kafka_admin: AdminClient
) -> None:
    ordinary = create_topic(kafka_admin, name_prefix=f"{PREFIX}-regex")
    ordinary_id = topic_id(kafka_bootstrap, ordinary)
    registry_id = topic_id(kafka_bootstrap, proxies.registry)
    group, member = f"{PREFIX}-{uuid.uuid4().hex}", uuid.uuid4().hex[:22]
    epoch, assigned = 0, set[uuid.UUID]()
    deadline = time.monotonic() + 60
    while ordinary_id not in assigned:
        assert time.monotonic() < deadline, "the broker assigned the ordinary topic"
        answer = call(
            proxies.refusing,
            CONSUMER_GROUP_HEARTBEAT,
            1,
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            rebalance_timeout=datetime.timedelta(seconds=30),
            subscribed_topic_regex=f"({proxies.registry}|{ordinary})",
            topic_partitions=(),
        )
        assert answer.error_code == ErrorCode.none
        epoch = answer.member_epoch
        if answer.assignment is not None:
            assigned = {uuid.UUID(str(t.topic_id)) for t in answer.assignment.topic_partitions}
            assert registry_id not in assigned
        time.sleep(0.5)


def test_offset_fetch_of_every_topic_leaves_out_the_registry(
    proxies: Proxies, kafka_bootstrap: str
) -> None:
    group = nested(OFFSET_FETCH, 8, "OffsetFetchRequestGroup")(
        group_id=f"{PREFIX}-group", topics=None
    )

    def topics(address: str) -> set[str]:
        answer = call(address, OFFSET_FETCH, 8, groups=(group,), require_stable=False)
        return {str(t.name) for g in answer.groups for t in g.topics}

    assert proxies.registry in topics(kafka_bootstrap.split(",")[0]), "committed directly"
    for address in (proxies.refusing, proxies.forwarding):
        assert proxies.registry not in topics(address)


def test_a_classic_group_subscribing_to_the_registry_is_refused(proxies: Proxies) -> None:
    protocol = nested(JOIN_GROUP, 9, "JoinGroupRequestProtocol")(
        name="range", metadata=subscription(proxies.registry)
    )
    answer = call(
        proxies.refusing,
        JOIN_GROUP,
        9,
        group_id=f"{PREFIX}-{uuid.uuid4().hex}",
        session_timeout=datetime.timedelta(seconds=30),
        rebalance_timeout=datetime.timedelta(seconds=30),
        member_id="",
        protocol_type="consumer",
        protocols=(protocol,),
    )
    assert answer.error_code == ErrorCode.topic_authorization_failed


def test_consumer_offsets_fetched_by_name_is_refused(
    proxies: Proxies, kafka_bootstrap: str
) -> None:
    for address in (proxies.refusing, proxies.forwarding):
        got = fetch(address, 12, OFFSETS)
        assert got.error_code == ErrorCode.topic_authorization_failed
        assert not got.records


def delete_records(address: str, topic: str, offset: int) -> Any:
    partition = nested(DELETE_RECORDS, 2, "DeleteRecordsPartition")
    entry = nested(DELETE_RECORDS, 2, "DeleteRecordsTopic")
    answer = call(
        address,
        DELETE_RECORDS,
        2,
        topics=(entry(name=topic, partitions=(partition(partition_index=0, offset=offset),)),),
        timeout=datetime.timedelta(seconds=10),
    )
    ((found,),) = [t.partitions for t in answer.topics]
    return found.error_code


def delete_topic(address: str, topic: str) -> Any:
    entry = nested(DELETE_TOPICS, 6, "DeleteTopicState")
    answer = call(
        address,
        DELETE_TOPICS,
        6,
        topics=(entry(name=topic, topic_id=uuid.UUID(int=0)),),
        timeout=datetime.timedelta(seconds=10),
    )
    (found,) = answer.responses
    return found.error_code


def alter_config(address: str, topic: str) -> Any:
    config = nested(ALTER_CONFIGS, 2, "AlterableConfig")
    resource = nested(ALTER_CONFIGS, 2, "AlterConfigsResource")
    answer = call(
        address,
        ALTER_CONFIGS,
        2,
        resources=(
            resource(
                resource_type=2,
                resource_name=topic,
                configs=(config(name="cleanup.policy", value="delete"),),
            ),
        ),
        validate_only=False,
    )
    (found,) = answer.responses
    return found.error_code


def cleanup_policy(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource("topic", topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return str(configs["cleanup.policy"].value)


def listed_apis(address: str) -> set[int]:
    answer = call(address, API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    return {int(entry.api_key) for entry in answer.api_keys}


def test_admin_apis_are_refused_by_default_and_not_listed(
    proxies: Proxies, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, {"cleanup.policy": "compact"}, PREFIX)
    producer = Producer({"bootstrap.servers": proxies.refusing})
    producer.produce(topic, b"v", key=b"k")
    assert producer.flush(30) == 0
    refused = ErrorCode.cluster_authorization_failed
    assert delete_records(proxies.refusing, topic, 1) == refused
    assert alter_config(proxies.refusing, topic) == refused
    assert delete_topic(proxies.refusing, topic) == refused
    assert kafka_probe.count(topic) == 1
    assert cleanup_policy(kafka_admin, topic) == "compact"
    assert not {DELETE_TOPICS, DELETE_RECORDS, ALTER_CONFIGS} & listed_apis(proxies.refusing)
    assert {DELETE_TOPICS, DELETE_RECORDS, ALTER_CONFIGS} <= listed_apis(proxies.forwarding)


def test_forwarded_admin_apis_work_but_never_on_the_registry_or_internal_topics(
    proxies: Proxies, kafka_bootstrap: str, kafka_admin: AdminClient, kafka_probe: KafkaProbe
) -> None:
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    policy = cleanup_policy(kafka_admin, proxies.registry)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for _ in range(3):
        producer.produce(topic, b"v")
        producer.produce(proxies.registry, b"more dictionary bytes")
    assert producer.flush(30) == 0
    registry_records = kafka_probe.count(proxies.registry)
    address = proxies.forwarding
    assert delete_records(address, topic, 2) == ErrorCode.none
    assert kafka_probe.count(topic) == 1
    assert alter_config(address, topic) == ErrorCode.none
    for protected in (proxies.registry, OFFSETS):
        assert delete_records(address, protected, 1) == ErrorCode.topic_authorization_failed
        assert alter_config(address, protected) == ErrorCode.topic_authorization_failed
        assert delete_topic(address, protected) == ErrorCode.topic_authorization_failed
    assert kafka_probe.count(proxies.registry) == registry_records
    assert cleanup_policy(kafka_admin, proxies.registry) == policy
    assert proxies.registry in kafka_admin.list_topics(timeout=10).topics
    assert delete_topic(address, topic) == ErrorCode.none


def test_metadata_past_the_bound_is_answered_without_brokers_and_not_forwarded(
    proxies: Proxies,
) -> None:
    names = [f"{PREFIX}-unknown-{i}" for i in range(MAX_METADATA_TOPICS + 1)]
    with RawClient(proxies.refusing) as client:
        client.send(metadata(names))
        frame = client.receive()
        assert frame is not None
        _, answer = read_response(METADATA, 4, frame)
        assert answer.brokers == () and answer.topics == ()
        client.send(metadata(names[:MAX_METADATA_TOPICS], correlation_id=2))
        frame = client.receive()
        assert frame is not None
        _, answer = read_response(METADATA, 4, frame)
        assert answer.brokers, "within the bound: forwarded"
    (first, _) = proxies.processes
    refusals = first.events("request_refused_by_proxy")
    assert any("ZDICT_PROXY__MAX_METADATA_TOPICS" in e["detail"] for e in refusals)


def test_a_consumer_fetching_by_id_across_a_proxy_restart_reads_on(
    proxies: Proxies, kafka_admin: AdminClient
) -> None:
    """The restarted proxy has not seen the consumer's topic id named: its first Fetch gets
    UNKNOWN_TOPIC_ID, the client looks the topic up again through the proxy and reads on."""
    topic = create_topic(kafka_admin, 1, None, PREFIX)
    address, base = f"127.0.0.1:{free_port()}", free_port() - 1

    def proxy(name: str) -> Sidecar:
        return start_proxy(
            proxies.start,
            name,
            "--no-training",
            env=allowed(f"{PREFIX}-*"),
            address=address,
            port_base=base,
        )[1]

    def read(consumer: Consumer, count: int) -> list[bytes]:
        found: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(found) < count and time.monotonic() < deadline:
            found += [m.value() or b"" for m in consumer.consume(10, 0.5) if m.error() is None]
        return found

    first = proxy("access-restart-1")
    producer = Producer({"bootstrap.servers": address})
    consumer = Consumer({"bootstrap.servers": address, "group.id": f"{PREFIX}-restart"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        producer.produce(topic, b"before")
        assert producer.flush(30) == 0
        assert read(consumer, 1) == [b"before"]
        stop_proxy(first, TROUBLES)
        second = proxy("access-restart-2")
        producer.produce(topic, b"after")
        assert producer.flush(60) == 0
        assert read(consumer, 1) == [b"after"]
    finally:
        consumer.close()
    reasons = {e["reason"] for e in second.events("request_refused_by_proxy")}
    assert reasons <= {"unknown_topic_id"}, "nothing else of the consumer's refused"
    print(f"after the restart, refusals: {sorted(reasons) or 'none'}")
    stop_proxy(second, TROUBLES)
