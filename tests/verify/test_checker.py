from minibroker.verify.checker import Ack, Failure, Read, check, compare_replicas, Report


def test_clean_run_passes():
    acks = [Ack("a", 0, 0, 0), Ack("b", 0, 1, 1)]
    rep = check(acks, [], [Read("a", 0, 0), Read("b", 0, 1)])
    assert rep.ok and rep.acked == 2 and rep.read == 2


def test_acked_record_never_read_is_lost():
    rep = check([Ack("a", 0, 0, 0)], [], [])
    assert not rep.ok and [a.value for a in rep.lost] == ["a"]


def test_acked_record_read_at_another_offset_is_moved():
    rep = check([Ack("a", 0, 0, 0)], [], [Read("a", 0, 3)])
    assert not rep.ok and rep.moved[0][1] == 3


def test_value_read_at_two_offsets_is_duplicated():
    rep = check([Ack("a", 0, 0, 0)], [], [Read("a", 0, 0), Read("a", 0, 1)])
    assert rep.duplicated == [("a", [(0, 0), (0, 1)])]


def test_reading_a_definitely_failed_record_is_a_violation_but_indeterminate_is_not():
    fails = [Failure("x", 0, "NOT_ENOUGH_REPLICAS", 0), Failure("y", 0, "REQUEST_TIMED_OUT", 1)]
    rep = check([], fails, [Read("x", 0, 0), Read("y", 0, 1)])
    assert [f.value for f in rep.failed_read] == ["x"]
    assert rep.failed_definite == 1 and rep.failed_indeterminate == 1


def test_acked_values_out_of_send_order_are_reordered():
    acks = [Ack("a", 0, 1, 0), Ack("b", 0, 0, 1)]
    rep = check(acks, [], [Read("b", 0, 0), Read("a", 0, 1)])
    assert rep.reordered == [(0, "a", "b")]


def test_replicas_with_different_batches_at_one_offset_diverge():
    rep = Report()
    compare_replicas("t-0", {1: [(0, 4, 0, b"x"), (5, 9, 1, b"y")],
                             2: [(0, 4, 0, b"x"), (5, 9, 2, b"z")]}, rep)
    assert len(rep.divergent) == 1 and rep.divergent[0][1] == 5


def test_replica_that_is_only_shorter_does_not_diverge():
    rep = Report()
    compare_replicas("t-0", {1: [(0, 4, 0, b"x"), (5, 9, 1, b"y")], 2: [(0, 4, 0, b"x")]}, rep)
    assert rep.divergent == []


def test_one_offset_read_with_two_values_is_inconsistent():
    rep = check([], [], [Read("a", 0, 5)], live_reads=[Read("b", 0, 5)])
    assert rep.inconsistent == [(0, 5, ["a", "b"])] and not rep.ok


def test_a_value_a_live_reader_saw_must_be_in_the_final_read():
    rep = check([], [], [Read("a", 0, 0)], live_reads=[Read("a", 0, 0), Read("b", 0, 1)])
    assert [r.value for r in rep.vanished] == ["b"] and not rep.ok


def test_live_reads_that_the_final_read_repeats_are_fine():
    rep = check([Ack("a", 0, 0, 0)], [], [Read("a", 0, 0)], live_reads=[Read("a", 0, 0)])
    assert rep.ok and rep.read == 1


def test_never_sent_records_are_definite_failures():
    rep = check([], [Failure("x", 0, "NEVER_SENT", 0)], [Read("x", 0, 0)])
    assert [f.value for f in rep.failed_read] == ["x"]


def test_unconverged_replicas_fail_the_run_and_notes_do_not():
    rep = check([Ack("a", 0, 0, 0)], [], [Read("a", 0, 0)])
    rep.notes.append("informational")
    assert rep.ok and rep.lines()[-1] == "RESULT: PASS"
    rep.unconverged.append("t-0: broker 3 LEO 5, leader LEO 9")
    assert not rep.ok and any("UNCONVERGED" in line for line in rep.lines())
