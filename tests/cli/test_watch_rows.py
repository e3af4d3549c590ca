"""The live watch's table fits the terminal: which partitions it shows when they do not all fit."""
import dataclasses

from minibroker.cli.watch import fitting_views, row, unhealthy
from minibroker.client.observe import PartitionView, ReplicaView


def view(p: int, leader: int | None = 1, isr: tuple[int, ...] = (1, 2, 3), stuck: str | None = None,
         note: str = "") -> PartitionView:
    reps = tuple(ReplicaView(b, 10, 0, b in isr, stuck=stuck if b == 3 else None) for b in (1, 2, 3))
    return PartitionView("t", p, leader, 0, isr, None, 10, 0, reps, note)


def test_every_partition_is_shown_when_they_fit():
    views = [view(p) for p in range(5)]
    assert fitting_views(views, 5) == (views, None)


def test_the_first_partitions_and_a_line_for_the_rest_when_all_are_healthy():
    views = [view(p) for p in range(1000)]
    shown, more = fitting_views(views, 10)
    assert [v.partition for v in shown] == list(range(9))
    assert more is not None and more.startswith("... 991 more partitions, all healthy")


def test_unhealthy_partitions_are_shown_first_and_kept_in_order():
    views = [view(p) for p in range(1000)]
    views[500] = view(500, isr=(1, 2))
    views[700] = view(700, leader=None, isr=(3,))
    views[900] = view(900, stuck="fetch answered the same way twice")
    views[950] = view(950, note="broker 2 did not answer")
    assert [unhealthy(v) for v in (views[0], views[500], views[700], views[900], views[950])] == [
        False, True, True, True, True]
    shown, more = fitting_views(views, 7)
    assert [v.partition for v in shown] == [0, 1, 500, 700, 900, 950]
    assert more is not None and more.startswith("... 994 more partitions, all healthy")


def test_the_line_counts_the_unhealthy_partitions_left_out():
    views = [view(p, isr=(1,)) for p in range(50)]
    shown, more = fitting_views(views, 4)
    assert [v.partition for v in shown] == [0, 1, 2]
    assert more is not None and more.startswith("... 47 more partitions, 47 of them unhealthy")


def test_a_reassigning_partition_says_what_it_adds_and_removes_and_its_new_replica_is_not_missing_from_the_isr():
    reps = tuple(ReplicaView(b, 5, 0 if b != 3 else 5, b != 3) for b in (1, 2, 3))
    moving = PartitionView("t", 0, 1, 0, (1, 2), None, 10, 0, reps, "", adding=(3,), removing=(1,))
    assert row(moving)[-1] == "1:5/0  2:5/0  3:5/5*  (reassigning: adding 3; removing 1)"
    assert not unhealthy(moving)
    assert unhealthy(dataclasses.replace(moving, adding=(), removing=()))


def test_a_replica_held_back_by_its_replication_throttle_says_so():
    reps = (ReplicaView(1, 9, 0, True), ReplicaView(2, 9, 0, True), ReplicaView(3, 4, 5, False, throttled=True))
    moving = PartitionView("t", 0, 1, 0, (1, 2), None, 9, 0, reps, "", adding=(3,), removing=(1,))
    assert row(moving)[-1] == "1:9/0  2:9/0  3:4/5*  (reassigning: adding 3; removing 1; throttled 3)"
    still = PartitionView("t", 0, 1, 0, (1, 2), None, 9, 0, reps, "")
    assert row(still)[-1] == "1:9/0  2:9/0  3:4/5*  (throttled 3)"
