"""--compare-ceiling: the ceiling's JSON lines become medians per case, and ratios follow."""
from __future__ import annotations

import json

from minibroker.bench.ceiling import parse_ceiling, ratio_lines
from minibroker.bench.produce import BenchResult


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
