"""Reading replica logs from disk for the byte comparison: whole batches
only, in offset order across segments, a torn tail ignored, files left
untouched."""
import os

from minibroker.records import build_batch, stamp
from minibroker.storage import LogConfig
from minibroker.storage.log import PartitionLog
from minibroker.verify.checker import Report, compare_replicas
from minibroker.verify.replicas import converged, find_values, read_partition, read_segment_batches


def batch(values, base, epoch):
    return stamp(build_batch([v.encode() for v in values], timestamp_ms=1_700_000_000_000), base, epoch)


def write_log(directory, layout, segment_bytes=10_000_000):
    """layout: [(values, epoch)] appended as a follower would; returns the stamped batches."""
    log = PartitionLog.open(str(directory), LogConfig(segment_bytes=segment_bytes))
    out = []
    for values, epoch in layout:
        data = batch(values, log.log_end_offset, epoch)
        log.append_as_follower(data)
        out.append((log.log_end_offset - len(values), log.log_end_offset - 1, epoch, data))
    log.flush()
    log.close()
    return out


def test_partition_reads_back_every_batch_with_bounds_epoch_and_bytes(tmp_path):
    written = write_log(tmp_path / "t-0", [(["a", "b"], 0), (["c"], 0), (["d", "e", "f"], 2)])
    assert read_partition(str(tmp_path / "t-0")) == written


def test_batches_span_rolled_segments_in_offset_order(tmp_path):
    written = write_log(tmp_path / "t-0", [([f"v{i}"], 0) for i in range(40)], segment_bytes=400)
    assert len([n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log")]) > 1
    assert read_partition(str(tmp_path / "t-0")) == written


def test_a_torn_tail_is_left_out_and_the_file_is_not_touched(tmp_path):
    written = write_log(tmp_path / "t-0", [(["a"], 0), (["b"], 0), (["c"], 1)])
    (seg,) = [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log")]
    path = tmp_path / "t-0" / seg
    size = os.path.getsize(path)
    os.truncate(path, size - 5)
    batches, problem = read_segment_batches(str(path))
    assert batches == written[:2] and "past the end" in problem
    assert os.path.getsize(path) == size - 5


def test_upto_leaves_out_batches_ending_at_or_above_it(tmp_path):
    written = write_log(tmp_path / "t-0", [(["a", "b"], 0), (["c", "d"], 0)])
    assert read_partition(str(tmp_path / "t-0"), upto=3) == written[:1]
    assert read_partition(str(tmp_path / "missing")) == []


def test_find_values_says_at_which_offset_a_value_sits(tmp_path):
    write_log(tmp_path / "t-0", [(["a", "b"], 0), (["c"], 1)])
    assert find_values(str(tmp_path / "t-0"), ["c", "a", "zz"]) == {"a": 0, "c": 2}


def test_replicas_written_alike_compare_identical_and_a_different_epoch_diverges(tmp_path):
    same1 = write_log(tmp_path / "1", [(["a"], 0), (["b"], 1)])
    same2 = write_log(tmp_path / "2", [(["a"], 0), (["b"], 1)])
    other = write_log(tmp_path / "3", [(["a"], 0), (["b"], 2)])
    rep = Report()
    compare_replicas("t-0", {1: same1, 2: same2}, rep)
    assert rep.divergent == []
    compare_replicas("t-0", {1: same1, 3: other}, rep)
    assert [d[1] for d in rep.divergent] == [1]


def _st(role, leo, hw, epoch=3):
    return {"role": role, "leo": leo, "hw": hw, "leader_epoch": epoch}


def test_converged_needs_one_leader_hw_at_leo_and_every_replica_at_the_leaders_leo():
    replicas = {0: [1, 2, 3]}
    good = {0: {1: _st("leader", 10, 10), 2: _st("follower", 10, 9), 3: _st("follower", 10, 10)}}
    assert converged(good, 1, replicas) == (True, "")
    lagging = {0: {**good[0], 3: _st("follower", 8, 8)}}
    assert not converged(lagging, 1, replicas)[0]
    hw_behind = {0: {**good[0], 1: _st("leader", 10, 9)}}
    assert "HW" in converged(hw_behind, 1, replicas)[1]
    two_leaders = {0: {**good[0], 2: _st("leader", 10, 10, epoch=2)}}
    assert "2 brokers think they lead" in converged(two_leaders, 1, replicas)[1]
    silent = {0: {1: good[0][1], 2: good[0][2]}}
    assert "did not answer" in converged(silent, 1, replicas)[1]
    old_epoch = {0: {**good[0], 2: _st("follower", 10, 10, epoch=2)}}
    assert not converged(old_epoch, 1, replicas)[0]
