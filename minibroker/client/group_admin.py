"""Consumer-group administration (kafka-consumer-groups' client side).

Owns: listing groups (every broker answers for the groups it coordinates, as
Kafka's admin asks every broker), describing a group (its coordinator's
DescribeGroups and OffsetFetch, members' assignments decoded from Kafka's
consumer protocol, the high watermark of each partition for LAG), computing
and committing offset resets (only to a group without active members, as
Kafka), deleting groups, and deleting a group's committed offsets (KIP-496).

Must not know: formatting (minibroker.cli.consumer_groups), the group rules.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from minibroker.client.admin import Admin
from minibroker.client.consumer_protocol import decode_assignment
from minibroker.client.network import Address, now_ms
from minibroker.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import check
from minibroker.protocol.api import ApiKey

_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                    ErrorCode.COORDINATOR_NOT_AVAILABLE})


@dataclass(frozen=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]
    group_instance_id: str | None = None       # a static member's (KIP-345)


@dataclass(frozen=True)
class GroupView:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: tuple[MemberView, ...]
    committed: dict[TopicPartition, int]
    log_end: dict[TopicPartition, int]
    coordinator_address: Address | None = None


class GroupAdmin:
    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.net = admin.net

    async def coordinator(self, group_id: str) -> tuple[int, Address]:
        deadline = now_ms() + self.admin.api_timeout_ms
        while True:
            _, resp = await self.net.request_any(ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": 0})
            code = resp.get("error", 0)
            if not code:
                return resp["node_id"], (resp["host"], resp["port"])
            if code not in _RETRY or now_ms() >= deadline:
                raise KafkaError(code, f"the coordinator of group {group_id}: {resp.get('message', '')}",
                                 remote=True)
            await asyncio.sleep(0.1)

    async def _call(self, group_id: str, api: ApiKey, body: dict[str, Any],
                    error_of: Any = lambda r: r.get("error", 0)) -> tuple[tuple[int, Address], dict[str, Any]]:
        """The coordinator's answer (retried while retriable, until the API timeout), with who answered."""
        deadline = now_ms() + self.admin.api_timeout_ms
        while True:
            node, addr = await self.coordinator(group_id)
            resp = await self.net.request_address(addr, api, body, channel="meta")
            code = error_of(resp)
            if code not in _RETRY or now_ms() >= deadline:
                return (node, addr), resp
            await asyncio.sleep(0.1)

    async def list_groups(self, states: list[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group, from every broker."""
        resp = await self.admin.metadata([])
        out: set[tuple[str, str, str]] = set()
        for b in resp["brokers"]:
            r = check(await self.net.request_address((b["host"], b["port"]), ApiKey.LIST_GROUPS,
                                                     {"states": states or []}, channel="meta"))
            out |= {(g["group_id"], g["protocol_type"], g["state"]) for g in r["groups"]}
        return sorted(out)

    async def describe(self, group_id: str) -> GroupView:
        (node, addr), resp = await self._call(group_id, ApiKey.DESCRIBE_GROUPS, {"groups": [group_id]},
                                      lambda r: r.get("error") or r["groups"][0]["error"])
        check(resp)
        g = resp["groups"][0]
        if g["error"]:
            raise KafkaError(g["error"], f"describing group {group_id}", remote=True)
        members = []
        for m in g["members"]:
            try:
                tps = tuple(decode_assignment(m["assignment"])) if g["protocol_type"] == "consumer" else ()
            except ValueError:
                tps = ()
            members.append(MemberView(m["member_id"], m["client_id"], m["client_host"], tps,
                                      m.get("group_instance_id")))
        _, off = await self._call(group_id, ApiKey.OFFSET_FETCH, {"group_id": group_id, "topics": None})
        check(off)
        committed = {TopicPartition(t["topic"], p["partition"]): p["offset"] for t in off["topics"]
                     for p in t["partitions"] if p["offset"] >= 0}
        wanted = set(committed) | {tp for m in members for tp in m.assignment}
        ends = await self.admin.list_offsets({tp: LATEST_TIMESTAMP for tp in sorted(wanted)}) if wanted else {}
        return GroupView(group_id, g["state"], g["protocol_type"], g["protocol"], node, tuple(members),
                         committed, {tp: r.offset for tp, r in ends.items()}, addr)

    async def reset_inputs(self, group_id: str, tps: list[TopicPartition] | None, timestamp_ms: int | None
                           ) -> tuple[list[TopicPartition], dict[TopicPartition, int], dict[TopicPartition, int],
                                      dict[TopicPartition, int], dict[TopicPartition, int]]:
        """What a reset decides from, for `tps` (None: the partitions the group has committed offsets for):
        (the partitions, their committed offsets, log start offsets, high watermarks, and the first offset
        at or after `timestamp_ms` (-1 where none; empty without a time))."""
        view = await self.describe(group_id)
        parts = sorted(view.committed) if tps is None else tps
        if not parts:
            return [], dict(view.committed), {}, {}, {}
        earliest = await self.admin.list_offsets({tp: EARLIEST_TIMESTAMP for tp in parts})
        latest = await self.admin.list_offsets({tp: LATEST_TIMESTAMP for tp in parts})
        at = await self.admin.list_offsets({tp: timestamp_ms for tp in parts}) if timestamp_ms is not None else {}
        return (parts, dict(view.committed), {tp: r.offset for tp, r in earliest.items()},
                {tp: r.offset for tp, r in latest.items()}, {tp: r.offset for tp, r in at.items()})

    async def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids (KafkaError UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist)."""
        (td,) = await self.admin.describe_topics([topic])
        return sorted(pd.partition for pd in td.partitions)

    async def commit(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """A simple commit (generation -1, no member): refused unless the group is Empty."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, o in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append({"partition": tp.partition, "offset": o})
        _, resp = await self._call(group_id, ApiKey.OFFSET_COMMIT, {
            "group_id": group_id, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]},
            lambda r: next((p["error"] for t in r.get("topics", ()) for p in t["partitions"] if p["error"]), 0))
        check(resp)
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error"]:
                    raise KafkaError(p["error"], f"committing {t['topic']}-{p['partition']} for group {group_id}",
                                     remote=True)

    async def delete(self, group_id: str) -> int:
        _, resp = await self._call(group_id, ApiKey.DELETE_GROUPS, {"groups": [group_id]},
                                   lambda r: r.get("error") or r["results"][0]["error"])
        check(resp)
        return int(resp["results"][0]["error"])

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: the group-level error (every partition then carries it, as Kafka's admin
        client reports it) and each partition's error; 0 where its offset is gone."""
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(set(partitions)):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        _, resp = await self._call(group_id, ApiKey.OFFSET_DELETE, {
            "group_id": group_id, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        group_error = int(resp.get("error", 0))
        if group_error:
            return group_error, {tp: group_error for tp in partitions}
        out = {TopicPartition(t["topic"], p["partition"]): int(p["error"]) for t in resp["topics"]
               for p in t["partitions"]}
        return 0, out
