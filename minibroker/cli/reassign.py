"""`minibroker reassign-partitions` (kafka-reassign-partitions): --generate, --execute, --verify, --cancel, --list.

Thin by rule: the JSON files, Kafka's output lines, and Admin's alter/list
partition reassignments (KIP-455); the controller does the work. --generate
proposes a placement with Kafka's AdminUtils algorithm
(minibroker.controller.placement), as Kafka's tool does, a random start each run.
--execute --throttle sets Kafka's replication throttles (KIP-73) first: the
throttled-replicas topic configs (`throttle_plan`) and the throttled-rate
broker configs; --verify (once nothing is being reassigned) and --cancel clear
them, unless --preserve-throttles.
"""
from __future__ import annotations

import json
import random
import sys

import click

from minibroker.cli.common import (bootstrap_option, fail, handle_errors, parse_file, parse_ids, reachable_bootstrap,
                                   run_async)
from minibroker.cli.format import java_exception
from minibroker.client.admin import Admin
from minibroker.client.types import TopicPartition
from minibroker.controller.placement import PlacementError, assign_replicas
from minibroker.dynamic_config import ResourceType
from minibroker.errors import ErrorCode, KafkaError
from minibroker.replication.throttle import (FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS,
                                             UNLIMITED)

# Kafka's throttle configs (ReassignPartitionsCommand's BROKER_LEVEL_THROTTLES and TOPIC_LEVEL_THROTTLES);
# Kafka also clears replica.alter.log.dirs.io.max.bytes.per.second (the --replica-alter-log-dirs-throttle);
# minibroker has no log-dir moves (one log directory a broker), so neither that option nor that config.
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE)
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

CANNOT_EXECUTE = ("Cannot execute because there is an existing partition assignment.  Use --additional to override "
                  "this and create a new partition assignment in addition to the existing one. The --additional "
                  "flag can also be used to change the throttle by resubmitting the current reassignment.")
MUST_VERIFY = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
               "throttle is removed.")


def plan_from_json(text: str) -> dict[TopicPartition, list[int]]:
    """--reassignment-json-file: {"version": 1, "partitions": [{"topic": T, "partition": N, "replicas": [...]}]}
    (`log_dirs`, if given, must be "any": no log dir moves); ValueError says what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list) or doc.get("version", 1) != 1:
        raise ValueError('expected {"version": 1, "partitions": [{"topic": "...", "partition": N, '
                         '"replicas": [...]}, ...]}')
    if not doc["partitions"]:
        raise ValueError("Partition reassignment list cannot be empty")
    plan: dict[TopicPartition, list[int]] = {}
    dups: list[str] = []
    for e in doc["partitions"]:
        replicas = e.get("replicas") if isinstance(e, dict) else None
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and type(e.get("partition")) is int
                and isinstance(replicas, list) and replicas and all(type(r) is int for r in replicas)):
            raise ValueError(f"partition entry {json.dumps(e)}: expected a string topic, an integer partition "
                             "and a non-empty list of integer replicas")
        dirs = e.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or any(d != "any" for d in dirs)):
            raise ValueError(f"partition entry {json.dumps(e)}: log_dirs other than \"any\" are not supported "
                             "(a broker has one log directory)")
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"Partition replica lists may not contain duplicate entries: "
                             f"{e['topic']}-{e['partition']} contains {replicas}")
        tp = TopicPartition(e["topic"], e["partition"])
        if tp in plan:
            dups.append(str(tp))
        plan[tp] = list(replicas)
    if dups:
        raise ValueError(f"Partition reassignment contained duplicate topic partitions: {', '.join(sorted(set(dups)))}")
    return plan


def topics_from_json(text: str) -> list[str]:
    """--topics-to-move-json-file: {"topics": [{"topic": "..."}], "version": 1}; ValueError says what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if (not isinstance(doc, dict) or not isinstance(doc.get("topics"), list) or doc.get("version", 1) != 1
            or not all(isinstance(t, dict) and isinstance(t.get("topic"), str) for t in doc["topics"])):
        raise ValueError('expected {"topics": [{"topic": "..."}, ...], "version": 1}')
    names = [t["topic"] for t in doc["topics"]]
    if not names:
        raise ValueError("List of topics to reassign contains no topics")
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError(f"List of topics to reassign contains duplicate entries: {', '.join(dups)}")
    return names


def parse_broker_list(text: str) -> list[int]:
    ids = parse_ids(text, "--broker-list")
    dups = sorted({b for b in ids if ids.count(b) > 1})
    if dups:
        raise ValueError(f"Duplicate broker IDs in --broker-list: {','.join(map(str, dups))}")
    return ids


def propose(current: dict[TopicPartition, list[int]], racks: dict[int, str | None],
            rng: random.Random | None = None) -> dict[TopicPartition, list[int]]:
    """Kafka's generateAssignment: each topic placed anew on the brokers (`racks`), keeping its partition
    count and replication factor (the first partition's)."""
    out: dict[TopicPartition, list[int]] = {}
    for topic in sorted({tp.topic for tp in current}):
        parts = sorted(tp.partition for tp in current if tp.topic == topic)
        rf = len(current[TopicPartition(topic, parts[0])])
        plan = assign_replicas(racks, len(parts), rf, rng=rng)
        out.update({TopicPartition(topic, p): replicas for p, replicas in zip(parts, plan, strict=True)})
    return out


def assignment_json(assignment: dict[TopicPartition, list[int]]) -> str:
    """Kafka's rollback JSON, compact, partitions in topic-partition order."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": rs, "log_dirs": ["any"] * len(rs)}
        for tp, rs in sorted(assignment.items())]}, separators=(",", ":"))


def throttle_plan(current: dict[TopicPartition, list[int]],
                  ongoing: dict[TopicPartition, tuple[list[int], list[int], list[int]]],
                  plan: dict[TopicPartition, list[int]]) -> tuple[dict[str, str], dict[str, str], list[int]]:
    """Kafka's calculateProposedMoveMap and the throttles it gives: (leader throttled replicas by topic,
    follower throttled replicas by topic, the brokers to throttle).

    The move map starts from every reassignment in progress (`ongoing`: replicas, adding, removing):
    sources = its replicas but the adding ones, destinations = the adding ones. Each planned partition
    then gets sources = those of its reassignment in progress, else its `current` replicas, and
    destinations = its target replicas but the sources. A topic's leader list names every source of
    every partition in the map, its follower list every destination that is not a source, each as
    `partition:broker` sorted as strings (Kafka's TreeSet<String>: "0:1" < "0:10" < "0:2") and joined
    with ","; the brokers are every source and destination, in numeric order."""
    moves: dict[str, dict[int, tuple[set[int], set[int]]]] = {}
    for tp, (replicas, adding, _removing) in ongoing.items():
        moves.setdefault(tp.topic, {})[tp.partition] = (set(replicas) - set(adding), set(adding))
    for tp, target in plan.items():
        parts = moves.setdefault(tp.topic, {})
        if tp.partition in parts:
            sources = parts[tp.partition][0]
        elif tp in current:
            sources = set(current[tp])
        else:
            raise ValueError(f"Trying to reassign a topic partition {tp} with 0 replicas")
        parts[tp.partition] = (sources, set(target) - sources)
    leader = {topic: ",".join(sorted({f"{p}:{b}" for p, (src, _) in parts.items() for b in src}))
              for topic, parts in moves.items()}
    follower = {topic: ",".join(sorted({f"{p}:{b}" for p, (src, dst) in parts.items() for b in dst if b not in src}))
                for topic, parts in moves.items()}
    brokers = sorted({b for parts in moves.values() for src, dst in parts.values() for b in src | dst})
    return leader, follower, brokers


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


def _names(tps: list[TopicPartition]) -> str:
    return ",".join(str(tp) for tp in sorted(tps))


def verify_lines(plan: dict[TopicPartition, list[int]], current: dict[TopicPartition, list[int]],
                 ongoing: set[TopicPartition]) -> list[str]:
    """ReassignPartitionsCommand's status lines for each planned partition."""
    lines = ["Status of partition reassignment:"]
    for tp, target in sorted(plan.items()):
        if tp in ongoing:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif current.get(tp) == target:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            now = ",".join(str(r) for r in current.get(tp, []))
            lines.append(f"There is no active reassignment of partition {tp}, but replica set is {now} rather than "
                         f"{','.join(str(r) for r in target)}.")
    return lines


def list_lines(ongoing: dict[TopicPartition, tuple[list[int], list[int], list[int]]]) -> list[str]:
    if not ongoing:
        return ["No partition reassignments found."]

    def ids(rs: list[int]) -> str:
        return ",".join(str(r) for r in rs)
    return ["Current partition reassignments:"] + [
        f"{tp}: replicas: {ids(r)}. adding: {ids(a)}. removing: {ids(d)}." for tp, (r, a, d) in sorted(ongoing.items())]


def error_lines(what: str, errors: dict[TopicPartition, KafkaError]) -> list[str]:
    return [f"Error {what}{_plural(len(errors))} for:"] + [
        f"{tp}: org.apache.kafka.common.errors.{java_exception(int(e.code), e.message)}"
        for tp, e in sorted(errors.items())]


@click.command(name="reassign-partitions")
@bootstrap_option
@click.option("--reassignment-json-file", type=click.Path(dir_okay=False),
              help='The plan: {"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": [2,3]}]}.')
@click.option("--generate", is_flag=True, help="Propose a plan moving --topics-to-move-json-file's topics onto "
                                               "--broker-list (printed, not started).")
@click.option("--topics-to-move-json-file", type=click.Path(dir_okay=False),
              help='--generate: {"topics": [{"topic": "orders"}], "version": 1}.')
@click.option("--broker-list", help="--generate: the brokers to place the replicas on, such as 1,2,3.")
@click.option("--disable-rack-aware", is_flag=True, help="--generate: ignore the brokers' racks.")
@click.option("--execute", is_flag=True, help="Start the reassignment the plan describes.")
@click.option("--verify", is_flag=True, help="Whether the plan's reassignments are done; once no reassignment is "
                                             "in progress, clears the throttles.")
@click.option("--cancel", is_flag=True, help="Cancel the plan's reassignments in progress (their old replicas stay), "
                                             "and clear the throttles.")
@click.option("--list", "list_", is_flag=True, help="Every reassignment in progress.")
@click.option("--additional", is_flag=True, help="Execute this reassignment in addition to any other ongoing ones. "
                                                 "This option can also be used to change the throttle of an ongoing "
                                                 "reassignment.")
@click.option("--throttle", type=int, default=-1, show_default=True,
              help="The movement of partitions between brokers will be throttled to this value (bytes/sec). This "
                   "option can be included with --execute when a reassignment is started, and it can be altered by "
                   "resubmitting the current reassignment along with the --additional flag. The throttle rate "
                   "should be at least 1 KB/s.")
@click.option("--preserve-throttles", is_flag=True, help="Do not modify broker or topic throttles.")
@handle_errors
def reassign_partitions(bootstrap_server: str | None, reassignment_json_file: str | None, generate: bool,
                        topics_to_move_json_file: str | None, broker_list: str | None, disable_rack_aware: bool,
                        execute: bool, verify: bool, cancel: bool, list_: bool, additional: bool, throttle: int,
                        preserve_throttles: bool) -> None:
    """Move partition replicas between brokers, as kafka-reassign-partitions: new replicas copy the log from the
    leader, join the ISR, and then the old ones leave (the leader moves if it is one of them)."""
    actions = {"generate": generate, "execute": execute, "verify": verify, "cancel": cancel, "list": list_}
    if sum(actions.values()) != 1:
        fail("Command must include exactly one action: --generate, --execute, --verify, --cancel, --list")
    action = next(name for name, given in actions.items() if given)
    # Kafka's permitted arguments of each action (joptsimple names an option "[throttle]").
    ctx = click.get_current_context()
    if not execute and ctx.get_parameter_source("throttle") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError(f'Option "[throttle]" can\'t be used with action "[{action}]"')
    if preserve_throttles and not (verify or cancel):
        raise click.UsageError(f'Option "[preserve-throttles]" can\'t be used with action "[{action}]"')
    if throttle > UNLIMITED:
        raise click.BadParameter(f"{throttle} is not a long (at most {UNLIMITED})", param_hint="--throttle")
    if generate and not (topics_to_move_json_file and broker_list):
        fail("Missing required argument \"[topics-to-move-json-file]\" or \"[broker-list]\"")
    if not (list_ or generate) and not reassignment_json_file:
        fail("Missing required argument \"[reassignment-json-file]\"")
    plan = parse_file(reassignment_json_file, plan_from_json) if reassignment_json_file and not generate else {}
    moving = parse_file(topics_to_move_json_file, topics_from_json) if generate and topics_to_move_json_file else []
    try:
        brokers = parse_broker_list(broker_list) if generate and broker_list else []
    except ValueError as exc:
        fail(f"Error: {exc}")
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> int:
        async with Admin(bootstrap) as admin:
            if generate:
                known = {b.node_id: b.rack for b in (await admin.describe_cluster()).brokers}
                unknown = [b for b in brokers if b not in known]
                if unknown:
                    click.echo(f"Error: Unknown broker id(s) in --broker-list: {','.join(map(str, unknown))}",
                               err=True)
                    return 1
                current = await _replicas(admin, moving)
                absent = [t for t in moving if not any(tp.topic == t for tp in current)]
                if absent:
                    click.echo(f"Error: Topic {absent[0]} not found", err=True)
                    return 1
                try:
                    proposed = propose(current, {b: None if disable_rack_aware else known[b] for b in brokers})
                except PlacementError as exc:
                    click.echo(f"Error: {exc}", err=True)
                    return 1
                click.echo(f"Current partition replica assignment\n{assignment_json(current)}\n")
                click.echo(f"Proposed partition reassignment configuration\n{assignment_json(proposed)}")
                return 0
            if list_:
                for line in list_lines(await admin.list_partition_reassignments()):
                    click.echo(line)
                return 0
            if cancel:
                ongoing = await admin.list_partition_reassignments(list(plan))
                active = [tp for tp in plan if tp in ongoing]
                if active:
                    errors = {tp: e for tp, e in (await admin.alter_partition_reassignments(
                        {tp: None for tp in active})).items() if e is not None}
                    if errors:
                        for line in error_lines("cancelling partition reassignment", errors):
                            click.echo(line, err=True)
                        return 1
                    click.echo(f"Successfully cancelled partition reassignment{_plural(len(active))} for: "
                               f"{_names(active)}")
                else:
                    click.echo("None of the specified partition reassignments are active.")
                click.echo("None of the specified partition moves are active.")
                if not preserve_throttles:
                    await _clear_all_throttles(admin, plan)
                return 0
            every = await admin.list_partition_reassignments()       # all of them, as Kafka's tool asks
            current = await _replicas(admin, sorted({tp.topic for tp in plan}))
            if verify:
                for line in verify_lines(plan, current, set(every)):
                    click.echo(line)
                click.echo("")
                if not every and not preserve_throttles:     # Kafka: !partsOngoing, any partition's
                    await _clear_all_throttles(admin, plan)
                return 0
            if not additional and every:
                click.echo(CANNOT_EXECUTE, err=True)
                return 1
            missing = sorted(tp for tp in plan if tp not in current)
            if missing:
                click.echo("Error: org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Unable to find "
                           f"partition: {missing[0]}", err=True)
                return 1
            click.echo("Current partition replica assignment\n")
            click.echo(assignment_json({tp: current[tp] for tp in plan if tp in current}))
            click.echo("\nSave this to use as the --reassignment-json-file option during rollback")
            if throttle >= 0:
                click.echo(MUST_VERIFY)
                await _set_throttles(admin, throttle_plan(current, every, plan), throttle)
                click.echo(f"The inter-broker throttle limit was set to {throttle} B/s")
            errors = {tp: e for tp, e in (await admin.alter_partition_reassignments(plan)).items() if e is not None}
            if errors:
                for line in error_lines("reassigning partition", errors):
                    click.echo(line, err=True)
                return 1
            click.echo(f"Successfully started partition reassignment{_plural(len(plan))} for {_names(list(plan))}")
            return 0
    sys.exit(run_async(go()))


async def _set_throttles(admin: Admin, throttles: tuple[dict[str, str], dict[str, str], list[int]],
                         rate: int) -> None:
    """Kafka's modifyReassignmentThrottle: SET each topic's throttled replicas, then both rates on every
    broker that moves a replica (a resource at a time: Admin alters one per request)."""
    leader, follower, brokers = throttles
    for topic in sorted(leader):
        await admin.incremental_alter_configs((ResourceType.TOPIC, topic),
                                              {LEADER_REPLICAS: leader[topic], FOLLOWER_REPLICAS: follower[topic]})
    for b in brokers:
        await admin.incremental_alter_configs((ResourceType.BROKER, str(b)),
                                              {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})


async def _clear_all_throttles(admin: Admin, plan: dict[TopicPartition, list[int]]) -> None:
    """Kafka's clearAllThrottles: DELETE the throttled rates on every registered broker and every broker of the
    plan's targets, and the throttled replicas of every topic of the plan (DELETE of an unset config is a no-op).
    Kafka builds both sets as Java HashSets and prints them in hash order; here they are sorted (broker ids
    numerically, topics by name) so the output is deterministic. (A HashSet<Integer> of small ids iterates in
    ascending order anyway, so the broker line reads as Kafka's; the topic order can differ.)"""
    brokers = sorted({b.node_id for b in (await admin.describe_cluster()).brokers}
                     | {b for replicas in plan.values() for b in replicas})
    click.echo(f"Clearing broker-level throttles on broker{_plural(len(brokers))} {','.join(map(str, brokers))}")
    for b in brokers:
        await admin.incremental_alter_configs((ResourceType.BROKER, str(b)), {}, BROKER_THROTTLES)
    topics = sorted({tp.topic for tp in plan})
    click.echo(f"Clearing topic-level throttles on topic{_plural(len(topics))} {','.join(topics)}")
    for topic in topics:
        await admin.incremental_alter_configs((ResourceType.TOPIC, topic), {}, TOPIC_THROTTLES)


async def _replicas(admin: Admin, topics: list[str]) -> dict[TopicPartition, list[int]]:
    """Each partition's replicas as the metadata has them (a topic that does not exist has none)."""
    out: dict[TopicPartition, list[int]] = {}
    for topic in topics:
        try:
            described = await admin.describe_topics([topic])
        except KafkaError as exc:
            if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            continue
        for td in described:
            for pd in td.partitions:
                out[TopicPartition(td.name, pd.partition)] = list(pd.replicas)
    return out
