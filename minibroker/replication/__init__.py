"""Pure replication cores: the partition leader state machine (leader.py), the
partition follower state machine (follower_core.py) with its truncation
arithmetic (follower.py), and the rules about read replicas and ISR
eligibility (read_replica.py). No asyncio, sockets, files or clocks."""
from minibroker.replication.follower import epoch_end_offset, truncation_offset
from minibroker.replication.follower_core import FetchPhase, LogView, PartitionFollower
from minibroker.replication.leader import (
    Decision,
    FollowerState,
    PartitionLeader,
    PendingIsrChange,
)
from minibroker.replication.profile import KAFKA, LESSON, Profile, profile_by_name

__all__ = [
    "Decision", "FollowerState", "PartitionLeader", "PendingIsrChange",
    "Profile", "LESSON", "KAFKA", "profile_by_name",
    "truncation_offset", "epoch_end_offset",
    "FetchPhase", "LogView", "PartitionFollower",
]
