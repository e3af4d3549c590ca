"""On-disk storage: segments, offset indexes, crash recovery, checkpoints and
the leader-epoch cache. Knows nothing about the network or replication.

Public API (see each module's docstring):

* `LogConfig` (log_config.py): Kafka's topic-level log properties.
* `LogManager` (manager.py): all logs of a data dir, the HW / recovery-point
  / log-start checkpoints and the clean-shutdown marker.
* `PartitionLog` (log.py): one partition's log: `append_as_leader`,
  `append_as_follower`, `read`, `truncate_to`, `truncate_fully_and_start_at`,
  `maybe_roll`, `delete_old_segments`, `maybe_increment_log_start_offset`,
  `flush` (in a thread), `close`.
* `LeaderEpochCache` (epoch_cache.py): epoch -> start offset, Kafka's rules.
* checkpoint.py: the D4 file format, atomic writes, `CorruptCheckpointError`.
"""
from minibroker.storage.checkpoint import (
    CorruptCheckpointError, LeaderEpochCheckpointFile, OffsetCheckpointFile,
)
from minibroker.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from minibroker.storage.loader import LoadInfo
from minibroker.storage.log import AppendResult, PartitionLog, UnexpectedAppendOffset
from minibroker.storage.log_config import LogConfig
from minibroker.storage.manager import CLEAN_SHUTDOWN_FILE, LogManager, validate_topic_name

__all__ = [
    "AppendResult", "CLEAN_SHUTDOWN_FILE", "CorruptCheckpointError", "LeaderEpochCache",
    "LeaderEpochCheckpointFile", "LoadInfo", "LogConfig", "LogManager", "OffsetCheckpointFile",
    "PartitionLog", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "UnexpectedAppendOffset",
    "validate_topic_name",
]
