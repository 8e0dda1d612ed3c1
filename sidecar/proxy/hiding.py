"""Protected topics (internal topics and the registry topic, `topics.TopicView.protected`) kept
out of every response a client is shown, unless `proxy.show_internal_topics`.

A request naming a protected topic is refused (`access`), but some requests name no topic and
are answered with all of them: OffsetFetch of a group's every topic, a ConsumerGroupHeartbeat
whose regex the broker matches against the registry, ConsumerGroupDescribe, DescribeGroups.
Their answers are parsed and the entries naming a protected topic, by name or by an id a listing
named as protected, or as a config or ACL resource, are left out, as a broker leaves out what a
client may not describe; a list of topic names loses the protected ones. Found by the response's
kio schema, as `access` finds topics in requests. The consumer protocol bytes of the classic
group APIs (JoinGroup's member subscriptions, SyncGroup's assignment, DescribeGroups' both) are
read (`group_protocol`) and written again without them. An answer that names none is passed as
it came.

Produce and Fetch answers are not walked here (a Produce to a protected topic is refused; Fetch
answers are filtered as they are decoded, `fetch`), nor the listings `topics` filters.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from typing import Any, Final

from kio.index import load_response_schema

from sidecar.proxy import group_protocol
from sidecar.proxy.access import (
    ENTITIES,
    ENTITY,
    ID,
    NAME,
    NAMES,
    topic_plan,
)
from sidecar.proxy.topics import LISTING, TopicView
from sidecar.proxy.versions import DESCRIBE_GROUPS, FETCH, JOIN_GROUP, PRODUCE, SYNC_GROUP

#: The resource type of a topic, in config resources and ACLs alike.
TOPIC_RESOURCE: Final = 2
#: The APIs whose answers carry the consumer protocol.
GROUP_PROTOCOL_APIS: Final = frozenset({JOIN_GROUP, SYNC_GROUP, DESCRIBE_GROUPS})


@functools.cache
def hides(api_key: int, version: int) -> bool:
    """Whether an answer of `api_key` in `version` can name a topic and is walked here."""
    if api_key in (PRODUCE, FETCH) or api_key in LISTING:
        return False
    if api_key in GROUP_PROTOCOL_APIS:
        return True
    return bool(topic_plan(load_response_schema(api_key, version)).fields)


class ResponseHiding:
    """Leaves protected topics out of parsed answers (see module)."""

    def __init__(self, view: TopicView) -> None:
        self.view = view

    def hide(self, api_key: int, body: Any) -> Any | None:
        """`body`, the parsed answer of `api_key`, without protected topics; None: it names
        none (or they are shown)."""
        if self.view.show_internal:
            return None
        changed = self._entity(body)
        if api_key in GROUP_PROTOCOL_APIS:
            changed = self._group_protocol(api_key, changed or body) or changed
        return changed

    def _names_hidden(self, entity: Any) -> bool:
        """Whether entry `entity` is about a protected topic, by its name or id, or as a config
        or ACL resource."""
        plan = topic_plan(type(entity))
        if plan.resource and getattr(entity, "resource_type", None) == TOPIC_RESOURCE:
            return self.view.hidden(str(entity.resource_name))
        for field_name, kind in plan.fields:
            value = getattr(entity, field_name)
            if value is None:
                continue
            if kind == NAME and self.view.hidden(str(value)):
                return True
            if kind == ID and isinstance(value, uuid.UUID) and self.view.protected_id(value):
                return True
        return False

    def _entity(self, entity: Any) -> Any | None:
        """`entity` without protected entries below it; None: it has none."""
        changes: dict[str, Any] = {}
        for field_name, kind in topic_plan(type(entity)).fields:
            value = getattr(entity, field_name)
            if value is None:
                continue
            if kind == NAMES:
                kept = tuple(name for name in value if not self.view.hidden(str(name)))
                if len(kept) != len(value):
                    changes[field_name] = kept
            elif kind == ENTITY:
                inner = self._entity(value)
                if inner is not None:
                    changes[field_name] = inner
            elif kind == ENTITIES:
                items = self._entries(value)
                if items is not None:
                    changes[field_name] = items
        return dataclasses.replace(entity, **changes) if changes else None

    def _entries(self, entries: tuple[Any, ...]) -> tuple[Any, ...] | None:
        kept: list[Any] = []
        changed = False
        for entry in entries:
            if self._names_hidden(entry):
                changed = True
                continue
            inner = self._entity(entry)
            changed = changed or inner is not None
            kept.append(entry if inner is None else inner)
        return tuple(kept) if changed else None

    def _group_protocol(self, api_key: int, body: Any) -> Any | None:
        """`body` with its consumer protocol bytes stripped of protected topics; None: they
        name none."""
        if api_key == JOIN_GROUP:
            protocol_type = getattr(body, "protocol_type", None)
            members = self._members(body.members, protocol_type, metadata="subscription")
            return None if members is None else dataclasses.replace(body, members=members)
        if api_key == SYNC_GROUP:
            protocol_type = getattr(body, "protocol_type", None)
            data = self._bytes("assignment", body.assignment, protocol_type)
            return None if data is None else dataclasses.replace(body, assignment=data)
        groups = []
        changed = False
        for group in body.groups:
            members = self._members(
                group.members,
                group.protocol_type,
                member_metadata="subscription",
                member_assignment="assignment",
            )
            changed = changed or members is not None
            groups.append(group if members is None else dataclasses.replace(group, members=members))
        return dataclasses.replace(body, groups=tuple(groups)) if changed else None

    def _members(
        self, members: tuple[Any, ...], protocol_type: str | None, **fields: group_protocol.Kind
    ) -> tuple[Any, ...] | None:
        kept = []
        changed = False
        for member in members:
            changes = {}
            for field_name, kind in fields.items():
                data = self._bytes(kind, getattr(member, field_name), protocol_type)
                if data is not None:
                    changes[field_name] = data
            changed = changed or bool(changes)
            kept.append(dataclasses.replace(member, **changes) if changes else member)
        return tuple(kept) if changed else None

    def _bytes(
        self, kind: group_protocol.Kind, data: bytes | None, protocol_type: str | None
    ) -> bytes | None:
        message = group_protocol.read(kind, data, protocol_type)
        if message is None:
            return None
        stripped = group_protocol.strip(message, self.view.hidden)
        return None if stripped is None else group_protocol.write(stripped)
