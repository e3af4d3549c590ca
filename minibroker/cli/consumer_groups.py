"""`minibroker consumer-groups` (kafka-consumer-groups): --list, --describe, --reset-offsets, --delete,
--delete-offsets.

Thin by rule: options and Kafka's output formats; the work is in
minibroker.client.group_admin.
"""
from __future__ import annotations

import sys

import click

from minibroker.cli.common import bootstrap_option, fail, handle_errors, reachable_bootstrap, run_async
from minibroker.client.admin import Admin
from minibroker.client.group_admin import GroupAdmin, GroupView
from minibroker.client.types import TopicPartition
from minibroker.cli.format import java_exception
from minibroker.cli.reset_spec import ResetError, new_offsets, parse_spec, parse_topics
from minibroker.clock import wall_ms
from minibroker.errors import ErrorCode, KafkaError, error_name

_DRY_RUN_WARNING = ("WARN: No action will be performed as the --execute option is missing. "
                    "You should add the --dry-run option explicitly if you are scripting this command "
                    "and want to keep the current default behavior without prompting.")


def describe_lines(v: GroupView) -> list[str]:
    """Kafka's ConsumerGroupCommand offsets table (LOG-END-OFFSET is the high watermark; LAG against it)."""
    rows: list[tuple[str, str, str, str, str, str, str, str, str]] = []
    owner: dict[TopicPartition, tuple[str, str, str]] = {}
    for m in v.members:
        for tp in m.assignment:
            owner[tp] = (m.member_id, m.host, m.client_id)
    for tp in sorted(set(v.committed) | set(owner)):
        cur = v.committed.get(tp)
        end = v.log_end.get(tp)
        lag = "-" if cur is None or end is None else str(max(0, end - cur))
        cid, host, client = owner.get(tp, ("-", "-", "-"))
        rows.append((v.group_id, tp.topic, str(tp.partition), "-" if cur is None else str(cur),
                     "-" if end is None else str(end), lag, cid, host, client))
    for m in v.members:
        if not m.assignment:
            rows.append((v.group_id, "-", "-", "-", "-", "-", m.member_id, m.host, m.client_id))
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
              "CLIENT-ID")
    gw = max([15, len(v.group_id)])
    tw = max([15] + [len(r[1]) for r in rows])
    cw = max([15] + [len(r[6]) for r in rows])
    hw = max([15] + [len(r[7]) for r in rows])
    out = [""]
    for r in [header, *rows]:
        out.append(f"{r[0]:<{gw}} {r[1]:<{tw}} {r[2]:<10} {r[3]:<15} {r[4]:<15} {r[5]:<15} {r[6]:<{cw}} "
                   f"{r[7]:<{hw}} {r[8]}")
    return out


def members_lines(v: GroupView, verbose: bool) -> list[str]:
    """Kafka's `--describe --members [--verbose]` table: GROUP-INSTANCE-ID only when a member is static."""
    rows = [(v.group_id, m.member_id, m.group_instance_id or "", m.host, m.client_id, str(len(m.assignment)),
             _assignment_text(m.assignment)) for m in v.members]
    static = any(r[2] for r in rows)
    gw = max([15] + [len(r[0]) for r in rows])
    cw = max([15] + [len(r[1]) for r in rows])
    iw = max([17] + [len(r[2]) for r in rows])
    hw = max([15] + [len(r[3]) for r in rows])
    lw = max([15] + [len(r[4]) for r in rows])

    def line(r: tuple[str, ...]) -> str:
        instance = f"{r[2]:<{iw}} " if static else ""
        return f"{r[0]:<{gw}} {r[1]:<{cw}} {instance}{r[3]:<{hw}} {r[4]:<{lw}} {r[5]:<15} " + (r[6] if verbose else "")
    return ["", line(("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")),
            *(line(r) for r in rows)]


def _assignment_text(tps: tuple[TopicPartition, ...]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ", ".join(sorted(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in by_topic.items())) or "-"


def state_lines(v: GroupView) -> list[str]:
    """Kafka's `--describe --state` table (its first column takes the coordinator column's width, as Kafka's)."""
    host, port = v.coordinator_address or ("", -1)
    coordinator = f"{host}:{port} ({v.coordinator})"
    w = max(25, len(coordinator))
    return ["", f"{'GROUP':<{w}} {'COORDINATOR (ID)':<25} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<15} #MEMBERS",
            f"{v.group_id:<{w}} {coordinator:<25} {v.protocol:<20} {v.state:<15} {len(v.members)}"]


def delete_offsets_lines(group: str, topics: list[str], group_error: int,
                         results: dict[TopicPartition, int]) -> tuple[list[str], list[str]]:
    """kafka-consumer-groups --delete-offsets: (stdout lines, stderr lines). A partition -1 is a topic
    whose partitions could not be listed ("Not Provided"); a partition error is also the top-level one."""
    out: list[str] = []
    err: list[str] = []
    top = group_error or next((c for _, c in sorted(results.items()) if c), 0)
    if top == 0:
        out.append(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group}")
    else:
        message = {
            ErrorCode.INVALID_GROUP_ID: f"'{group}' is not valid.",
            ErrorCode.GROUP_ID_NOT_FOUND: f"'{group}' does not exist.",
            ErrorCode.NON_EMPTY_GROUP: f"Deleting offsets of a consumer group '{group}' is forbidden if the group "
                                       "is not empty.",
            ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "Encounter some partition level error, see the follow-up details:",
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "Encounter some partition level error, see the follow-up details:",
        }.get(top, f"Encounter some unknown error: {error_name(top)}")     # type: ignore[call-overload]
        err += ["", f"Error: {message}"]
    out += ["", f"{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}"]
    for tp, code in sorted(results.items(), key=lambda kv: kv[0].topic + str(kv[0].partition)):
        status = "Successful" if code == 0 else f"Error: :org.apache.kafka.common.errors.{java_exception(code)}"
        partition = str(tp.partition) if tp.partition >= 0 else "Not Provided"
        out.append(f"{tp.topic:<30} {partition:<15} {status:<15}")
    return out, err


async def _partitions_of(ga: GroupAdmin, scope: list[tuple[str, list[int] | None]]
                         ) -> tuple[list[TopicPartition], dict[TopicPartition, int]]:
    """The partitions --topic names (a bare topic: all of its partitions), and each topic whose
    partitions could not be listed, as partition -1 with its error (kafka-consumer-groups' "Not Provided")."""
    wanted: list[TopicPartition] = []
    errors: dict[TopicPartition, int] = {}
    for name, parts in scope:
        if parts is not None:
            wanted += [TopicPartition(name, p) for p in parts]
            continue
        try:
            wanted += [TopicPartition(name, p) for p in await ga.partitions(name)]
        except KafkaError as exc:
            errors[TopicPartition(name, -1)] = int(exc.code)
    return list(dict.fromkeys(wanted)), errors


def reset_lines(group: str, targets: dict[TopicPartition, int]) -> list[str]:
    out = ["", f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}"]
    for tp, o in sorted(targets.items()):
        out.append(f"{group:<30} {tp.topic:<30} {tp.partition:<10} {o:<15}")
    return out


@click.command("consumer-groups")
@bootstrap_option
@click.option("--list", "list_", is_flag=True, help="List every consumer group.")
@click.option("--describe", is_flag=True, help="Describe --group: offsets, log end (high watermark), lag, members.")
@click.option("--reset-offsets", is_flag=True, help="Reset --group's offsets (dry run unless --execute).")
@click.option("--delete", is_flag=True, help="Delete --group (only a group without active members).")
@click.option("--delete-offsets", is_flag=True,
              help="Delete --group's committed offsets of each --topic (not of topics its members subscribe to).")
@click.option("--group", help="The consumer group.")
@click.option("--topic", "topics", multiple=True,
              help="--reset-offsets, --delete-offsets: a topic, or TOPIC:P,Q for some of its partitions "
                   "(repeatable).")
@click.option("--all-topics", is_flag=True, help="--reset-offsets: every topic the group has offsets for.")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the high watermark.")
@click.option("--to-offset", type=int, help="Reset to this offset (clamped to the log's range).")
@click.option("--shift-by", type=int, help="Reset to the committed offset plus this (negative: back), clamped.")
@click.option("--to-current", is_flag=True, help="Reset to the committed offset (the high watermark where none).")
@click.option("--to-datetime", help="Reset to the first offset at or after YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm] "
                                    "(no zone: local time).")
@click.option("--by-duration", help="Reset to the first offset at or after now minus an ISO-8601 duration "
                                    "(PT1H, P1DT2H30M).")
@click.option("--execute", is_flag=True, help="Commit the reset offsets.")
@click.option("--dry-run", is_flag=True, help="Only show the offsets a reset would commit (the default).")
@click.option("--state", "states", is_flag=False, flag_value="", default=None,
              help="--list: only groups in these comma-separated states (and show STATE); "
                   "--describe: the group's coordinator, assignment strategy, state and member count.")
@click.option("--members", is_flag=True, help="--describe: the group's members (GROUP-INSTANCE-ID for static ones).")
@click.option("--offsets", is_flag=True, help="--describe: the offsets table (the default).")
@click.option("--verbose", is_flag=True, help="--describe --members: each member's assignment too.")
@handle_errors
def consumer_groups(bootstrap_server: str | None, list_: bool, describe: bool, reset_offsets: bool, delete: bool,
                    delete_offsets: bool, group: str | None, topics: tuple[str, ...], all_topics: bool,
                    to_earliest: bool, to_latest: bool, to_offset: int | None, shift_by: int | None,
                    to_current: bool, to_datetime: str | None, by_duration: str | None, execute: bool,
                    dry_run: bool, states: str | None, members: bool, offsets: bool, verbose: bool) -> None:
    """List, describe, reset and delete consumer groups and their offsets, as kafka-consumer-groups does."""
    actions = sum((list_, describe, reset_offsets, delete, delete_offsets))
    if actions != 1:
        fail("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
             "--delete-offsets")
    if not list_ and not group:
        fail("Option --group is required with --describe, --delete, --reset-offsets and --delete-offsets")
    if delete_offsets and not topics:
        fail("Option --delete-offsets needs at least one --topic")
    try:
        scope = parse_topics(topics)
        spec = parse_spec(earliest=to_earliest, latest=to_latest, to_offset=to_offset, shift_by=shift_by,
                          current=to_current, to_datetime=to_datetime, by_duration=by_duration,
                          now_ms=wall_ms()) if reset_offsets else None
    except ResetError as exc:
        fail(f"Error: {exc}")
    if (members or offsets) and not describe:
        fail("Option --members and --offsets are only valid with --describe")
    if verbose and not (describe and members):
        fail("Option --verbose is only valid with --describe --members")
    if describe and sum((members, offsets, states is not None)) > 1:
        fail("Option --describe takes at most one of --members, --offsets and --state")
    bootstrap = reachable_bootstrap(bootstrap_server)

    async def go() -> None:
        async with Admin(bootstrap) as admin:
            ga = GroupAdmin(admin)
            assert list_ or group is not None
            if list_:
                wanted = [s.strip() for s in states.split(",") if s.strip()] if states is not None else None
                groups = await ga.list_groups(wanted)
                if wanted is None:
                    for gid, _, _ in groups:
                        click.echo(gid)
                else:
                    w = max([15] + [len(g[0]) for g in groups])
                    click.echo(f"{'GROUP':<{w}} STATE")
                    for gid, _, st in groups:
                        click.echo(f"{gid:<{w}} {st}")
            elif describe:
                assert group is not None
                v = await ga.describe(group)
                if v.state == "Dead":
                    fail(f"Error: Consumer group '{group}' does not exist.")
                if v.state in ("PreparingRebalance", "CompletingRebalance"):
                    click.echo(f"\nWarning: Consumer group '{group}' is rebalancing.")
                elif not v.members:
                    click.echo(f"\nConsumer group '{group}' has no active members.")
                if members:
                    lines = members_lines(v, verbose) if v.members else []     # Kafka: no table without rows
                elif states is not None:
                    lines = state_lines(v)
                else:
                    lines = describe_lines(v)
                for line in lines:
                    click.echo(line)
            elif delete:
                assert group is not None
                code = await ga.delete(group)
                if code == ErrorCode.NONE:
                    click.echo(f"Deletion of requested consumer groups ('{group}') was successful.")
                else:
                    fail(f"Error: Deletion of some consumer groups failed:\n* Group '{group}' could not be deleted "
                         f"due to: {java_exception(code)}")
            elif delete_offsets:
                assert group is not None
                asked, results = await _partitions_of(ga, scope)
                group_error, deleted = await ga.delete_offsets(group, asked) if asked else (0, {})
                results.update(deleted)
                out, err = delete_offsets_lines(group, list(topics), group_error, results)
                for line in err:
                    click.echo(line, err=True)
                for line in out:
                    click.echo(line)
                if err:
                    sys.exit(1)
            else:
                assert group is not None and spec is not None
                if bool(scope) == all_topics:
                    fail("One of the reset scopes should be defined: --all-topics, --topic.")
                if execute and dry_run:
                    fail("Option --execute and --dry-run cannot be used together")
                v = await ga.describe(group)
                if v.members or v.state not in ("Empty", "Dead"):
                    fail(f"Error: Assignments can only be reset if the group '{group}' is inactive, "
                         f"but the current state is {v.state}.")
                if all_topics:
                    tps: list[TopicPartition] | None = None
                else:
                    tps, unknown = await _partitions_of(ga, scope)
                    if unknown:
                        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"topic {sorted(unknown)[0].topic} does not exist")
                parts, committed, lo, hi, at = await ga.reset_inputs(group, tps, spec.value if spec.by_time else None)
                try:
                    targets, warnings = new_offsets(parts, spec, committed, lo, hi, at)
                except ResetError as exc:
                    fail(f"Error: {exc}")
                for line in warnings:
                    click.echo(f"\n{line}")
                if not execute and not dry_run:
                    click.echo(_DRY_RUN_WARNING)
                if execute:
                    await ga.commit(group, targets)
                for line in reset_lines(group, targets):
                    click.echo(line)
    run_async(go())
