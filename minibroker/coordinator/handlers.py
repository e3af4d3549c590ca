"""The group APIs' request handlers (msgpack bodies, minibroker.protocol.api), over the GroupCoordinator.

Owns: translating the ten group APIs' bodies into GroupCoordinator calls and
its answers back into bodies. The Kafka listener (minibroker.kafka.handlers)
calls these same handlers, so both listeners answer from one coordinator.

Must not know: sockets, Kafka's wire format, any group rule.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from minibroker.coordinator.group import GroupState
from minibroker.coordinator.service import GroupCoordinator, NotCoordinator
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.api import ApiKey

Handler = Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]]


def _client_host(ctx: Any) -> str:
    peer = getattr(getattr(ctx, "conn", None), "peer", "?")
    return "/" + peer.rsplit(":", 1)[0] if peer and peer != "?" else "/unknown"


def group_handlers(gc: Callable[[], GroupCoordinator | None]) -> dict[ApiKey, Handler]:
    """The handlers, by API key; `gc()` is None until the broker has started its coordinator."""

    def coordinator() -> GroupCoordinator:
        c = gc()
        if c is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is starting")
        return c

    async def find_coordinator(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        err, msg, node, host, port = await coordinator().find_coordinator(body["key"], body["key_type"],
                                                                         ctx.listener)
        return {"error": int(err), "message": msg, "node_id": node, "host": host,
                "port": port}

    async def join_group(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        c = coordinator()
        session = body["session_timeout_ms"]
        rebalance = body["rebalance_timeout_ms"] if body["rebalance_timeout_ms"] >= 0 else session
        try:
            r = await c.join(body["group_id"], body["member_id"], body["group_instance_id"], ctx.client_id,
                             _client_host(ctx), session, rebalance, body["protocol_type"],
                             [(p["name"], p["metadata"]) for p in body["protocols"]],
                             body.get("require_known_member_id", True), body.get("supports_skip_assignment", False))
        except NotCoordinator as exc:
            return {"error": int(exc.code), "message": str(exc), "generation_id": -1, "protocol_type": None,
                    "protocol_name": None, "leader": "", "member_id": body["member_id"], "members": []}
        return {"error": int(r.error), "message": "", "generation_id": r.generation_id,
                "protocol_type": r.protocol_type, "protocol_name": r.protocol_name, "leader": r.leader,
                "member_id": r.member_id, "skip_assignment": r.skip_assignment,
                "members": [{"member_id": m, "group_instance_id": i, "metadata": meta} for m, i, meta in r.members]}

    async def sync_group(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = await coordinator().sync(body["group_id"], body["member_id"], body["generation_id"],
                                         body.get("protocol_type"), body.get("protocol_name"),
                                         [(a["member_id"], a["assignment"]) for a in body["assignments"]],
                                         body.get("group_instance_id"))
        except NotCoordinator as exc:
            return {"error": int(exc.code), "message": str(exc), "protocol_type": None, "protocol_name": None,
                    "assignment": b""}
        return {"error": int(r.error), "message": "", "protocol_type": r.protocol_type,
                "protocol_name": r.protocol_name, "assignment": r.assignment}

    async def heartbeat(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        try:
            code = coordinator().heartbeat(body["group_id"], body["member_id"], body["generation_id"],
                                           body.get("group_instance_id"))
        except NotCoordinator as exc:
            return {"error": int(exc.code), "message": str(exc)}
        return {"error": int(code), "message": ""}

    async def leave_group(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        try:
            members = body["members"]
            instances = body.get("group_instance_ids") or []
            errors = coordinator().leave(body["group_id"], [(m, instances[i] if i < len(instances) else None)
                                                            for i, m in enumerate(members)])
        except NotCoordinator as exc:
            return {"error": int(exc.code), "message": str(exc), "members": []}
        return {"error": 0, "message": "", "members": [{"member_id": m, "error": int(e)}
                                                       for m, e in zip(body["members"], errors, strict=True)]}

    async def offset_commit(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        """A partition the metadata does not hold is answered UNKNOWN_TOPIC_OR_PARTITION and not
        committed, before the coordinator sees the rest (Kafka checks it in KafkaApis)."""
        c = coordinator()
        offsets = []
        result: dict[tuple[str, int], ErrorCode] = {}
        for t in body["topics"]:
            for p in t["partitions"]:
                if c.has_partition(t["topic"], p["partition"]):
                    offsets.append((t["topic"], p["partition"], p["offset"], p["leader_epoch"], p["metadata"] or ""))
                else:
                    result[(t["topic"], p["partition"])] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if offsets:
            try:
                result.update(await c.commit(body["group_id"], body["generation_id"], body["member_id"], offsets,
                                             body.get("group_instance_id")))
            except NotCoordinator as exc:
                result.update({(t, p): exc.code for t, p, *_ in offsets})
        return {"topics": [{"topic": t["topic"], "partitions": [
            {"partition": p["partition"], "error": int(result[(t["topic"], p["partition"])])}
            for p in t["partitions"]]} for t in body["topics"]]}

    async def offset_fetch(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        wanted = None if body["topics"] is None else [(t["topic"], p) for t in body["topics"]
                                                      for p in t["partitions"]]
        try:
            rows = coordinator().fetch_offsets(body["group_id"], wanted)
        except NotCoordinator as exc:
            return {"error": int(exc.code), "message": str(exc), "topics": []}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for t, p, o in rows:
            by_topic.setdefault(t, []).append({
                "partition": p, "offset": -1 if o is None else o.offset,
                "leader_epoch": -1 if o is None else o.leader_epoch, "metadata": "" if o is None else o.metadata,
                "error": 0})
        return {"error": 0, "message": "", "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

    async def offset_delete(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        """A partition the metadata does not hold is UNKNOWN_TOPIC_OR_PARTITION, before the coordinator
        sees the rest (Kafka's KafkaApis); a group-level error answers no partition, as Kafka."""
        c = coordinator()
        unknown: dict[tuple[str, int], ErrorCode] = {}
        known: dict[str, list[int]] = {}
        for t in body["topics"]:
            for p in t["partitions"]:
                if c.has_partition(t["topic"], p):
                    known.setdefault(t["topic"], []).append(p)
                else:
                    unknown[(t["topic"], p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            decided = await c.delete_offsets(body["group_id"], list(known.items()))
        except NotCoordinator as exc:
            return {"error": int(exc.code), "topics": []}
        if decided.error != ErrorCode.NONE:
            return {"error": int(decided.error), "topics": []}
        result = dict(unknown)
        for topic, parts in decided.results:
            result.update({(topic, p): code for p, code in parts})
        return {"error": 0, "topics": [{"topic": t["topic"], "partitions": [
            {"partition": p, "error": int(result[(t["topic"], p)])} for p in dict.fromkeys(t["partitions"])]}
            for t in body["topics"]]}

    async def list_groups(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        states = {s.lower() for s in body["states"]} or None
        return {"error": 0, "groups": [{"group_id": g, "protocol_type": t, "state": s}
                                       for g, t, s in coordinator().list_groups(states)]}

    async def describe_groups(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        c = coordinator()
        out = []
        for gid in body["groups"]:
            entry: dict[str, Any] = {"group_id": gid, "error": 0, "state": GroupState.DEAD.value,
                                     "protocol_type": "", "protocol": "", "members": []}
            try:
                g = c.describe(gid)
            except NotCoordinator as exc:
                entry["error"] = int(exc.code)
                out.append(entry)
                continue
            if g is not None:
                stable = g.state is GroupState.STABLE
                entry.update(state=g.state.value, protocol_type=g.protocol_type or "",
                             protocol=g.protocol_name or "" if stable else "", members=[
                                 {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                  "client_id": m.client_id, "client_host": m.client_host,
                                  "metadata": m.metadata(g.protocol_name or "") if stable else b"",
                                  "assignment": m.assignment if stable else b""}
                                 for m in g.members.values()])
            out.append(entry)
        return {"groups": out}

    async def delete_groups(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        c = coordinator()
        results = []
        for gid in body["groups"]:
            try:
                code = await c.delete(gid)
            except NotCoordinator as exc:
                code = exc.code
            results.append({"group_id": gid, "error": int(code)})
        return {"results": results}

    return {
        ApiKey.FIND_COORDINATOR: find_coordinator, ApiKey.JOIN_GROUP: join_group, ApiKey.SYNC_GROUP: sync_group,
        ApiKey.HEARTBEAT: heartbeat, ApiKey.LEAVE_GROUP: leave_group, ApiKey.OFFSET_COMMIT: offset_commit,
        ApiKey.OFFSET_FETCH: offset_fetch, ApiKey.LIST_GROUPS: list_groups, ApiKey.DESCRIBE_GROUPS: describe_groups,
        ApiKey.DELETE_GROUPS: delete_groups, ApiKey.OFFSET_DELETE: offset_delete,
    }
