"""--compare-ceiling: the ceiling's JSON lines become medians per case, and ratios follow."""
from __future__ import annotations

import json

from minibroker.bench.ceiling import parse_ceiling, ratio_lines
from minibroker.bench.produce import AwaitedCpu, BenchResult


def _line(run: int, case: str, rec_s: float, p50: float = 0.0, p99: float = 0.0) -> str:
    return json.dumps({"run": run, "case": case, "rec_s": rec_s, "p50_us": p50, "p99_us": p99})


def test_the_ceiling_is_the_median_of_its_runs_per_case_and_other_lines_are_ignored() -> None:
    out = ["noise", _line(0, "awaited", 3000, 300, 400), _line(1, "awaited", 3600, 200, 500),
           _line(2, "awaited", 3300, 250, 450), "{not json", _line(0, "blob 100 w=8", 800_000)]
    c = parse_ceiling(out)
    assert c.rec_s == {"awaited": 3300, "blob 100 w=8": 800_000}
    assert c.p50_us["awaited"] == 250 and c.p99_us["awaited"] == 450
    assert c.case("blob 100 ") == "blob 100 w=8" and c.case("blob 1000 ") is None


def test_ratios_divide_minibroker_by_the_matching_ceiling_case() -> None:
    c = parse_ceiling([_line(0, "blob 100 w=8", 800_000), _line(0, "blob 1000 w=8", 1_600_000),
                       _line(0, "awaited", 4000, 250, 500)])
    res = BenchResult()
    res.batched_records, res.batched_seconds = 400_000, 1.0
    res.awaited, res.latencies_ms = 4, [0.5, 0.5, 0.5, 0.5]
    lines = ratio_lines(res.figures(), c)
    assert lines[0].endswith("= 0.50") and "'blob 100 w=8'" in lines[0]
    assert lines[1].endswith("= 0.25") and "'blob 1000 w=8'" in lines[1]
    assert lines[2] == "ratio awaited rate / ceiling: 2,000 / 4,000 = 0.50"
    assert lines[3] == "ratio awaited p50 / ceiling p50: 500 us / 250 us = 2.00x"
    assert lines[4] == "ratio awaited p99 / ceiling p99: 500 us / 500 us = 1.00x"


def test_ratios_from_medians_over_runs_and_nothing_for_figures_not_measured() -> None:
    c = parse_ceiling([_line(0, "blob 100 w=8", 800_000), _line(0, "awaited", 4000, 250, 0)])
    assert ratio_lines({}, c) == []
    lines = ratio_lines({"batched_rate": 600_000, "awaited_rate": 3000, "awaited_p50_ms": 0.375,
                         "awaited_p99_ms": 0.9}, c)
    assert lines == ["ratio batched / ceiling 'blob 100 w=8': 600,000 / 800,000 = 0.75",
                     "ratio awaited rate / ceiling: 3,000 / 4,000 = 0.75",
                     "ratio awaited p50 / ceiling p50: 375 us / 250 us = 1.50x"]      # no ceiling p99: no line


def test_the_awaited_cpu_per_record_is_divided_by_the_ceilings_cpu_per_request_of_the_same_process() -> None:
    def row(run: int, leader: float) -> str:
        return json.dumps({"run": run, "case": "awaited", "rec_s": 5000, "p50_us": 200, "p99_us": 300,
                           "producer_cpu_us_per_req": 40.0, "leader_cpu_us_per_req": leader,
                           "follower_cpu_us_per_req": 30.0})
    c = parse_ceiling([row(0, 90.0), row(1, 110.0), row(2, 100.0), _line(0, "blob 100 w=8", 800_000)])
    assert c.cpu_us["awaited"] == {"producer_cpu_us_per_req": 40.0, "leader_cpu_us_per_req": 100.0,
                                   "follower_cpu_us_per_req": 30.0}
    assert c.cpu_us["blob 100 w=8"] == {}                    # a case that does not print them
    res = BenchResult()
    res.awaited, res.latencies_ms = 2, [0.5, 0.5]
    res.awaited_cpu = AwaitedCpu(80.0, 1, {1: 300.0, 2: 100.0, 3: 120.0})
    fig = res.figures()
    assert (fig["awaited_cpu_client_us"], fig["awaited_cpu_leader_us"], fig["awaited_cpu_follower_us"]) == (
        80.0, 300.0, 110.0)                                  # the followers' mean, as the ceiling's
    assert res.awaited_cpu.line() == ("awaited CPU per record: client 80 us, leader (broker 1) 300 us, "
                                      "followers 100 and 120 us")
    assert ratio_lines(fig, c)[-1] == ("ratio awaited CPU per record / ceiling's per request (us): "
                                       "client 80 / 40 = 2.00x, leader 300 / 100 = 3.00x, follower 110 / 30 = 3.67x")


def test_without_the_brokers_pids_only_the_clients_awaited_cpu_is_a_figure() -> None:
    res = BenchResult()
    res.awaited, res.latencies_ms = 1, [0.5]
    res.awaited_cpu = AwaitedCpu(75.0, 2)
    fig = res.figures()
    assert fig["awaited_cpu_client_us"] == 75.0 and "awaited_cpu_leader_us" not in fig
    assert res.awaited_cpu.line() == "awaited CPU per record: client 75 us"
