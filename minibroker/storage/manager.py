"""LogManager: every partition log of one data directory, and its checkpoints.

Owns the data directory: the partition directories `<topic>-<partition>/`
and the topic id each was created for (`partition.metadata`, KIP-516), the
directories of deleted partitions (`<topic>-<partition>.<ms>-<n>-delete/`, renamed
at once and removed off the loop, as Kafka's LogManager.asyncDelete), the
data-dir checkpoints (`replication-offset-checkpoint` for HWs,
`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`) and the
clean-shutdown marker `.kafka_cleanshutdown`. Must not know about leaders,
ISRs or the network: the broker hands it HWs to persist and asks it for the
HW it loaded.

Lifecycle (all blocking calls; run them before the event loop starts or via
`asyncio.to_thread`):

* `LogManager(data_dir, config)` reads the checkpoints, opens and recovers
  every partition directory found (trusting segments when the marker is
  present, D5), then deletes the marker so that a crash from now on is
  recovered on the next start;
* while running: `get_or_create()` (on the loop: creating a log does no
  fsync), `retire_log()` (on the loop: closes and renames) then `purge()` (off
  it), `checkpoint_high_watermarks()` every
  replica.high.watermark.checkpoint.interval.ms, `flush_due()` from a flusher
  task, `checkpoint_offsets()` every log.flush.offset.checkpoint.interval.ms,
  `trash.drain()` when a retired segment's file.delete.delay.ms has passed;
* `shutdown()` flushes and closes every log, writes all checkpoints and
  finally the marker.
"""
from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping

from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event, EventSink, discard
from minibroker.storage import fsutil
from minibroker.storage.checkpoint import (
    HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, OffsetCheckpointFile,
    write_checkpoint,
)
from minibroker.storage.log import PartitionLog, wall_clock_ms
from minibroker.storage.log_config import LogConfig
from minibroker.storage.trash import SegmentTrash

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PARTITION_METADATA_FILE = "partition.metadata"
DELETE_SUFFIX = "-delete"
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")

TopicPartition = tuple[str, int]


def validate_topic_name(topic: str) -> None:
    """Kafka's legal topic names; also what keeps paths inside the data dir."""
    if not isinstance(topic, str) or not _TOPIC_RE.match(topic) or topic in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"topic name {topic!r} is not legal: use 1-249 of [a-zA-Z0-9._-], not '.' or '..'")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def is_deleted_partition_dir(name: str) -> bool:
    """`<topic>-<partition>.<ms>-<n>-delete`: a deleted partition's directory (`LogManager.retire_log`)."""
    return name.endswith(DELETE_SUFFIX) and parse_partition_dir(name.rpartition(".")[0]) is not None


def read_topic_id(directory: str) -> str | None:
    """The topic id in `directory`'s partition.metadata (Kafka's format: `version: 0`, `topic_id: ID`);
    None without one (a directory made before topic ids were kept) or when it cannot be read."""
    try:
        with open(os.path.join(directory, PARTITION_METADATA_FILE), encoding="utf-8") as f:
            fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    except (OSError, UnicodeDecodeError):
        return None
    if fields.get("version", "").strip() != "0":
        return None
    return fields.get("topic_id", "").strip() or None


def write_topic_id(directory: str, topic_id: str) -> None:
    """partition.metadata, written without an fsync (a crash that loses it leaves a directory without
    one, which the next metadata adopts)."""
    with open(os.path.join(directory, PARTITION_METADATA_FILE), "w", encoding="utf-8") as f:
        f.write(f"version: 0\ntopic_id: {topic_id}\n")


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not part.isdigit() or not topic:
        return None
    try:
        validate_topic_name(topic)
    except KafkaError:
        return None
    return topic, int(part)


class LogManager:
    def __init__(self, data_dir: str, default_config: LogConfig | None = None, *,
                 topic_config: Callable[[str], LogConfig | None] | None = None,
                 event_sink: EventSink = discard, clock: Callable[[], int] | None = None) -> None:
        """Open the data dir and recover every partition log in it (blocking).
        `topic_config(topic)` may supply per-topic configs at load time.
        Raises CorruptCheckpointError (naming the file) on a malformed checkpoint."""
        fsutil.assert_off_event_loop("LogManager()")
        self.data_dir = os.path.abspath(data_dir)
        self.default_config = default_config or LogConfig()
        self._topic_config = topic_config
        self._sink = event_sink
        self._clock = clock or wall_clock_ms
        # Every log's retired segment files, waiting for their delayed unlink (D10).
        self.trash = SegmentTrash(self._clock)
        os.makedirs(self.data_dir, exist_ok=True)
        self._hw_file = OffsetCheckpointFile(os.path.join(self.data_dir, HIGH_WATERMARK_FILE))
        self._rp_file = OffsetCheckpointFile(os.path.join(self.data_dir, RECOVERY_POINT_FILE))
        self._ls_file = OffsetCheckpointFile(os.path.join(self.data_dir, LOG_START_OFFSET_FILE))
        self._marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        for name in os.listdir(self.data_dir):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(self.data_dir, name))  # interrupted checkpoint write
        # Invariant: True iff the marker was present when this manager started.
        self.clean_shutdown = os.path.exists(self._marker)
        # Invariant: the last HW checkpointed (or loaded) per partition.
        self._hws: dict[TopicPartition, int] = self._hw_file.read()
        recovery_points = self._rp_file.read()
        log_starts = self._ls_file.read()
        self._logs: dict[TopicPartition, PartitionLog] = {}
        # Invariant: the topic id of each log's partition.metadata, for the logs that have one.
        self._topic_ids: dict[TopicPartition, str] = {}
        self._retired = 0                   # logs retired so far: with the clock, unique `-delete` names
        for name in sorted(os.listdir(self.data_dir)):
            if is_deleted_partition_dir(name):       # deleted before a crash or stop finished removing it
                shutil.rmtree(os.path.join(self.data_dir, name), ignore_errors=True)
                continue
            tp = parse_partition_dir(name)
            if tp is None or not os.path.isdir(os.path.join(self.data_dir, name)):
                continue
            config = (self._topic_config(tp[0]) if self._topic_config else None) or self.default_config
            self._logs[tp] = PartitionLog(
                os.path.join(self.data_dir, name), config,
                recovery_point=recovery_points.get(tp, 0), log_start_offset=log_starts.get(tp, 0),
                clean_shutdown=self.clean_shutdown, event_sink=self._sink, clock=self._clock,
                trash=self.trash)
            topic_id = read_topic_id(os.path.join(self.data_dir, name))
            if topic_id is not None:
                self._topic_ids[tp] = topic_id
        if self.clean_shutdown:
            os.unlink(self._marker)
            fsutil.fsync_dir(self.data_dir)
        self._closed = False

    # ------------------------------------------------------------ logs

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None,
                      topic_id: str | None = None) -> PartitionLog:
        """The log of `topic`-`partition`, created empty at offset 0 if absent.
        A given `config` replaces the log's current one. A given `topic_id` is recorded in the
        log's partition.metadata when it has none (a log of another topic id is the caller's to
        retire first, see `topic_id`)."""
        validate_topic_name(topic)
        if partition < 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"partition {partition} is negative")
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "log manager is shut down")
        tp = (topic, partition)
        log = self._logs.get(tp)
        if log is not None:
            if config is not None and config != log.config:
                log.update_config(config)
        else:
            directory = os.path.join(self.data_dir, partition_dir_name(topic, partition))
            log = PartitionLog(directory, config or self.default_config, clean_shutdown=False,
                               event_sink=self._sink, clock=self._clock, trash=self.trash)
            self._logs[tp] = log
        if topic_id is not None and tp not in self._topic_ids:
            write_topic_id(log.directory, topic_id)
            self._topic_ids[tp] = topic_id
        return log

    def topic_id(self, topic: str, partition: int) -> str | None:
        """The topic id the log of `topic`-`partition` was created for (None: no log, or none recorded)."""
        return self._topic_ids.get((topic, partition))

    def logs(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        return iter(list(self._logs.items()))

    def __contains__(self, tp: TopicPartition) -> bool:
        return tp in self._logs

    def retire_log(self, topic: str, partition: int) -> str | None:
        """Triggered when a replica is deleted (its topic deleted or created again, or the replica
        moved away): the log leaves the manager, its files are closed without a flush, and its
        directory is renamed `<topic>-<partition>.<ms>-<n>-delete` now, so that a log of the same name
        created next starts empty in a directory of its own. Cheap enough for the event loop.
        Returns the renamed directory for `purge` (None: no such log); raises OSError when the
        rename fails (the directory is then removed here, blocking, as it must not be reused). D11."""
        tp = (topic, partition)
        log = self._logs.pop(tp, None)
        if log is None:
            return None
        self._hws.pop(tp, None)
        self._topic_ids.pop(tp, None)
        log.abandon()
        self._retired += 1
        target = f"{log.directory}.{self._clock()}-{self._retired}{DELETE_SUFFIX}"
        try:
            os.rename(log.directory, target)
        except FileNotFoundError:
            return None
        except OSError:
            shutil.rmtree(log.directory, ignore_errors=True)
            raise
        return target

    def purge(self, directory: str) -> None:
        """Remove a directory `retire_log` renamed (blocking: run it in a worker thread)."""
        shutil.rmtree(directory, ignore_errors=True)
        fsutil.fsync_dir(self.data_dir)

    def delete_log(self, topic: str, partition: int) -> bool:
        """Retire and remove a partition's directory (blocking)."""
        gone = self.retire_log(topic, partition)
        if gone is None:
            return False
        self.purge(gone)
        return True

    # ------------------------------------------------------------ high watermarks

    def load_high_watermark(self, topic: str, partition: int) -> int:
        """The checkpointed HW clamped into [log start, LEO] (H7); 0 (clamped)
        when none was checkpointed. Emits `hw_move` when clamping changed it."""
        log = self._logs.get((topic, partition))
        if log is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no log for {topic}-{partition}")
        stored = self._hws.get((topic, partition), 0)
        hw = min(max(stored, log.log_start_offset), log.log_end_offset)
        if hw != stored:
            self._sink(Event("hw_move", self._clock(), log.name, stored, hw,
                             "checkpointed HW clamped to the log on load",
                             {"log_start_offset": log.log_start_offset, "log_end_offset": log.log_end_offset}))
        return hw

    def checkpoint_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Write `replication-offset-checkpoint` (blocking). Entries given here
        replace earlier ones; hosted partitions not given keep their last
        checkpointed value; partitions no longer hosted are dropped."""
        for tp, hw in high_watermarks.items():
            if tp in self._logs:
                self._hws[tp] = hw
        self._hws = {tp: hw for tp, hw in list(self._hws.items()) if tp in self._logs}
        self._hw_file.write(dict(self._hws))

    # ------------------------------------------------------------ other checkpoints

    def checkpoint_offsets(self) -> None:
        """Write the recovery-point and log-start-offset checkpoints (blocking)."""
        logs = list(self._logs.items())         # (the loop may retire a log meanwhile)
        for _, log in logs:
            log.recovery_point_lowered = False
        self._rp_file.write({tp: log.recovery_point for tp, log in logs})
        self._ls_file.write({tp: log.log_start_offset for tp, log in logs})

    def flush_due(self, now_ms: int | None = None) -> list[TopicPartition]:
        """The flusher task's body (blocking): flush every log whose policy
        asks for it, persist epoch caches whose checkpoint is due (every
        change but entries of appended batches, which the next flush writes), and rewrite the offset
        checkpoints if a truncation lowered a recovery point (so a crash
        cannot trust unflushed bytes written after a truncation). Returns
        the partitions flushed."""
        if any(log.recovery_point_lowered for log in list(self._logs.values())):
            self.checkpoint_offsets()
        flushed = []
        for tp, log in self.logs():
            if log.closed:
                continue
            target = log.due_flush_offset(now_ms)
            if target is not None:
                log.flush(target)
                flushed.append(tp)
            elif log.epoch_checkpoint_due:
                log.persist_epoch_cache()
        return flushed

    def shutdown(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """Clean shutdown (blocking): flush and close every log, write all
        checkpoints, then the clean-shutdown marker, fsynced."""
        fsutil.assert_off_event_loop("LogManager.shutdown")
        if self._closed:
            return
        for _, log in self.logs():
            log.close()
        if high_watermarks:
            self.checkpoint_high_watermarks(high_watermarks)
        else:
            self.checkpoint_high_watermarks({})
        self.checkpoint_offsets()
        write_checkpoint(self._marker, [])
        self._closed = True
