"""The bench's summary (min / median / max over runs) and issue 13's goal table: pure formatting."""
from __future__ import annotations

import json

from minibroker.bench.ceiling import parse_ceiling
from minibroker.bench.figures import Stat, fmt_stat, goal_rows, goal_table, summarize, summary_lines
from minibroker.bench.partitions import isr_counter_total
from minibroker.bench.produce import BenchResult
from minibroker.bench.runner import BenchReport


def _ceiling() -> list[str]:
    rows = [("blob 100 w=8", 800_000, 0, 0), ("blob 1000 w=8", 1_600_000, 0, 0), ("awaited", 4000, 250, 500)]
    return [json.dumps({"run": 0, "case": c, "rec_s": r, "p50_us": p50, "p99_us": p99}) for c, r, p50, p99 in rows]


def test_summarize_takes_min_median_max_over_the_runs_that_measured_each_figure() -> None:
    stats = summarize([{"batched_rate": 300.0, "e2e_p99_ms": 4.0}, {"batched_rate": 100.0},
                       {"batched_rate": 200.0, "e2e_p99_ms": 6.0}])
    assert stats["batched_rate"] == Stat(100.0, 200.0, 300.0, 3)
    assert stats["e2e_p99_ms"] == Stat(4.0, 5.0, 6.0, 2)
    assert summarize([]) == {}


def test_a_stat_prints_min_median_max_in_its_figures_format_and_one_value_once() -> None:
    assert fmt_stat("batched_rate", Stat(1234.4, 2345.6, 3456.0, 3)) == "1,234 / 2,346 / 3,456"
    assert fmt_stat("awaited_p50_ms", Stat(0.25, 0.25, 0.25, 1)) == "0.250"


def test_summary_lines_follow_the_figure_order_align_and_say_when_a_run_missed_a_figure() -> None:
    stats = summarize([{"e2e_p99_ms": 4.0, "batched_rate": 300.0}, {"batched_rate": 100.0}])
    lines = summary_lines(stats, 2)
    assert lines[0] == "summary over 2 runs (min / median / max):"
    assert lines[1] == "  batched acks=all (records/s)  100 / 200 / 300"
    assert lines[2] == "  end-to-end p99 (ms)           4.000  [1 of 2 runs]"
    assert summary_lines({}, 1) == []
    stats = summarize([{"batched_rate": 300.0}, {"batched_rate": 100.0}, {"idle_rss_mib": 80.0}])
    assert summary_lines(stats, 2, after={"idle_rss_mib": 1})[-1].endswith("  80  [once, after the runs]")


def test_the_loaded_rounds_after_the_runs_are_summarized_over_the_rounds_and_say_how_many() -> None:
    report = BenchReport(runs=[{"batched_rate": 900.0}, {"batched_rate": 1000.0}],
                         once={"idle_cpu_pct": 1.5, "rr_ratio": 0.4},
                         rounds=[{"beside_rate": 800.0, "multi_rate": 720.0, "multi_ratio": 0.9},
                                 {"beside_rate": 600.0, "multi_rate": 660.0, "multi_ratio": 1.1},
                                 {"beside_rate": 700.0, "multi_rate": 560.0, "multi_ratio": 0.8}])
    stats = report.stats()
    assert stats["multi_ratio"] == Stat(0.8, 0.9, 1.1, 3)
    assert stats["batched_rate"] == Stat(900.0, 950.0, 1000.0, 2)
    assert report.after_runs() == {"idle_cpu_pct": 1, "rr_ratio": 1, "beside_rate": 3, "multi_rate": 3,
                                   "multi_ratio": 3}
    lines = summary_lines(stats, 2, after=report.after_runs())
    assert any(line.endswith("0.80 / 0.90 / 1.10  [3 rounds, after the runs]") and "batched median" in line
               for line in lines)
    assert any(line.endswith("1.5  [once, after the runs]") for line in lines)


def test_bench_result_figures_leave_out_what_was_not_measured() -> None:
    res = BenchResult()
    assert res.figures() == {}
    res.batched_records, res.batched_seconds = 500_000, 2.0
    res.latencies_ms = [1.0, 2.0, 3.0, 4.0]
    res.consumed, res.consume_seconds = 500_000, 0.5
    f = res.figures(size=100)
    assert f["batched_rate"] == 250_000 and f["batched_mb_s"] == 25.0
    assert f["awaited_rate"] == 400 and f["awaited_p50_ms"] == 2.5 and f["awaited_p99_ms"] == 4.0
    assert f["consume_rate"] == 1_000_000


def _by_figure(stats: dict[str, Stat], **kw: object) -> dict[str, tuple[str, str, str]]:
    rows = goal_rows(stats, parse_ceiling(_ceiling()), **kw)  # type: ignore[arg-type]
    return {r.figure: (r.ratio, r.goal, r.verdict) for r in rows}


def test_goals_are_judged_on_the_median_against_the_ceiling_or_issue_13s_absolute_goal() -> None:
    stats = summarize([
        {"batched_rate": 600_000, "awaited_rate": 2000, "awaited_p50_ms": 0.5, "awaited_p99_ms": 2.5,
         "consume_rate": 1_600_000, "catchup_rate": 700_000, "e2e_p99_ms": 4.0, "failover_ms": 9500,
         "confluent_ratio": 0.7},
        {"batched_rate": 640_000, "awaited_rate": 2600, "awaited_p50_ms": 0.3, "awaited_p99_ms": 1.5,
         "consume_rate": 1_400_000, "catchup_rate": 500_000, "e2e_p99_ms": 6.0, "failover_ms": 11_000,
         "confluent_ratio": 0.9},
        {"batched_rate": 620_000, "awaited_rate": 2400, "awaited_p50_ms": 0.4, "awaited_p99_ms": 1.9,
         "consume_rate": 1_500_000, "catchup_rate": 600_000, "e2e_p99_ms": 5.0, "failover_ms": 10_000,
         "confluent_ratio": 0.8}])
    rows = _by_figure(stats, session_timeout_ms=9000)
    assert rows["batched vs blob 100"] == ("0.78", ">= 0.75 x ceiling", "met")
    assert rows["batched vs blob 1000"] == ("0.39", ">= 0.5 x ceiling", "not met")
    assert rows["awaited p50 (ms)"] == ("1.60", "<= 1.5 x ceiling", "not met")
    assert rows["awaited p99 (ms)"] == ("3.80", "<= 2 ms", "met")
    assert rows["awaited rate"] == ("0.60", ">= 0.6 x ceiling", "met")
    assert rows["consume"][2] == "met"
    assert rows["follower catch-up from zero"] == ("0.97", ">= batched rate (620,000)", "not met")
    assert rows["end-to-end p99 (ms)"][2] == "met"
    assert rows["failover gap (ms)"] == ("-", "<= session timeout + 1 s (10,000 ms)", "met")
    assert rows["confluent-kafka / minibroker"][2] == "met"
    assert rows["idle partitions CPU (%)"][2] == "not measured"


def test_skipped_figures_and_missing_ceiling_cases_are_not_judged() -> None:
    stats = summarize([{"batched_rate": 500_000.0, "idle_cpu_pct": 1.0, "idle_rss_mib": 99.0}])
    rows = {r.figure: r for r in goal_rows(stats, None, idle_partitions=100)}
    assert rows["batched vs blob 100"].verdict == "no ceiling case"
    assert rows["batched vs blob 100"].ceiling == "-"
    assert rows["awaited p99 (ms)"].verdict == "not measured"
    assert rows["failover gap (ms)"].verdict == "not measured"
    assert rows["idle 100 partitions CPU (%)"].verdict == "n/a (100 < 1000 partitions)"
    rows = {r.figure: r for r in goal_rows(stats, None, idle_partitions=1000)}
    assert rows["idle 1000 partitions CPU (%)"].verdict == "met"
    assert rows["idle 1000 partitions RSS (MiB)"].verdict == "not met"        # 99 MiB is 103.8 MB


def test_goal_table_is_fixed_width_with_a_header_rule_and_a_count_of_goals_met() -> None:
    stats = summarize([{"batched_rate": 600_000}, {"batched_rate": 700_000}])
    rows = goal_rows(stats, parse_ceiling(_ceiling()))
    lines = goal_table(rows, 2)
    assert lines[0] == "issue 13 goals (verdicts from the median of 2 runs):"
    head, rule, first = lines[1], lines[2], lines[3]
    assert head.split()[:4] == ["figure", "minibroker", "(min", "/"]
    assert set(rule.replace(" ", "")) == {"-"}
    assert first.split() == ["batched", "vs", "blob", "100", "600,000", "/", "650,000", "/", "700,000",
                             "800,000", "0.81", ">=", "0.75", "x", "ceiling", "met"]
    assert len(rule) >= len(head)                               # the rule spans every column
    assert head.index("ceiling") + len("ceiling") == first.index("800,000") + len("800,000")   # right-aligned
    assert lines[-1] == f"  1 of 2 judged goals met ({len(rows) - 2} not judged)"      # 0.41 of blob 1000


def test_isr_counters_are_summed_from_a_metrics_page() -> None:
    page = ("# HELP kafka_server_replicamanager_isrshrinks x\n# TYPE kafka_server_replicamanager_isrshrinks counter\n"
            "kafka_server_replicamanager_isrshrinks 3\nkafka_server_replicamanager_isrexpands 2.0\n"
            "kafka_server_replicamanager_partitioncount 40\n")
    assert isr_counter_total(page) == 5


def test_the_many_partition_aggregate_is_judged_on_sticky_runs_and_shows_round_robin_beside_it() -> None:
    stats = summarize([{"multi_ratio": 0.9, "rr_ratio": 0.5}])
    row = {r.figure: r for r in goal_rows(stats, None, idle_partitions=1000)}["idle 1000 partitions / 1 partition (x)"]
    assert (row.mine, row.goal, row.verdict) == ("0.90", ">= 0.8 (sticky runs; round robin 0.50)", "met")
    row = {r.figure: r for r in goal_rows(summarize([{"multi_ratio": 0.7}]), None, idle_partitions=1000)}[
        "idle 1000 partitions / 1 partition (x)"]
    assert (row.goal, row.verdict) == (">= 0.8 (sticky runs)", "not met")
    assert {r.figure: r for r in goal_rows(stats, None, idle_partitions=10)}[
        "idle 10 partitions / 1 partition (x)"].verdict == "n/a (10 < 1000 partitions)"
