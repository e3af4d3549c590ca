"""`minibroker bench produce`: the figures of a sitting, their min / median / max over
the runs, and issue 13's goal table. Pure: numbers in, lines out (no clusters, no clocks).

A run's figures are a mapping from a figure key (see FIGURES) to one number; a
figure that was skipped is simply absent. Verdicts are taken from the median."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from minibroker.bench.ceiling import Ceiling

RunFigures = Mapping[str, float]


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    fmt: str


FIGURES: tuple[Figure, ...] = (
    Figure("batched_rate", "batched acks=all", "records/s", ",.0f"),
    Figure("batched_mb_s", "batched acks=all", "MB/s", ".1f"),
    Figure("awaited_rate", "awaited single records", "records/s", ",.0f"),
    Figure("awaited_p50_ms", "awaited p50", "ms", ".3f"),
    Figure("awaited_p99_ms", "awaited p99", "ms", ".3f"),
    Figure("awaited_cpu_client_us", "awaited CPU per record: client", "us", ",.0f"),
    Figure("awaited_cpu_leader_us", "awaited CPU per record: leader", "us", ",.0f"),
    Figure("awaited_cpu_follower_us", "awaited CPU per record: a follower (mean)", "us", ",.0f"),
    Figure("consume_rate", "consume from the beginning", "records/s", ",.0f"),
    Figure("e2e_rate", "end-to-end offered rate", "records/s", ",.0f"),
    Figure("e2e_p50_ms", "end-to-end p50", "ms", ".3f"),
    Figure("e2e_p99_ms", "end-to-end p99", "ms", ".3f"),
    Figure("catchup_rate", "follower catch-up from zero", "records/s", ",.0f"),
    Figure("failover_ms", "failover gap after SIGKILL", "ms", ",.0f"),
    Figure("confluent_rate", "confluent-kafka acks=all batched", "records/s", ",.0f"),
    Figure("confluent_ratio", "confluent-kafka / minibroker producer", "x", ".2f"),
    Figure("idle_cpu_pct", "idle partitions: CPU, busiest broker", "% of a core", ".1f"),
    Figure("idle_rss_mib", "idle partitions: RSS, largest broker", "MiB", ",.0f"),
    Figure("idle_fds", "idle partitions: fds, most on a broker", "fds", ",.0f"),
    Figure("beside_rate", "batched on one partition beside the idle ones", "records/s", ",.0f"),
    Figure("beside_ratio", "that partition / the runs' batched median", "x", ".2f"),
    Figure("multi_rate", "batched over the idle partitions, sticky runs", "records/s", ",.0f"),
    Figure("multi_ratio", "those partitions / the runs' batched median", "x", ".2f"),
    Figure("rr_rate", "batched over the idle partitions, round robin", "records/s", ",.0f"),
    Figure("rr_ratio", "round robin / the runs' batched median", "x", ".2f"),
)
FIGURE_BY_KEY: dict[str, Figure] = {f.key: f for f in FIGURES}


@dataclass(frozen=True)
class Stat:
    """One figure over the runs that measured it."""
    min: float
    median: float
    max: float
    n: int


def summarize(runs: Sequence[RunFigures]) -> dict[str, Stat]:
    """Each figure any run measured -> its min / median / max over the runs that did."""
    values: dict[str, list[float]] = {}
    for run in runs:
        for key, value in run.items():
            values.setdefault(key, []).append(float(value))
    return {k: Stat(min(v), statistics.median(v), max(v), len(v)) for k, v in values.items()}


def fmt_value(key: str, value: float) -> str:
    fig = FIGURE_BY_KEY.get(key)
    return format(value, fig.fmt if fig else ",.2f")


def fmt_stat(key: str, stat: Stat) -> str:
    """`min / median / max` in the figure's format; a single value once."""
    if stat.n == 1:
        return fmt_value(key, stat.median)
    return " / ".join(fmt_value(key, v) for v in (stat.min, stat.median, stat.max))


def summary_lines(stats: Mapping[str, Stat], runs: int, after: Mapping[str, int] | None = None) -> list[str]:
    """The summary block: one line per measured figure, in FIGURES order. Figures in `after` were
    measured after the runs, that many times; others say when some run did not measure them."""
    after = after or {}

    def note(key: str) -> str:
        if key in after:
            return "  [once, after the runs]" if after[key] == 1 else f"  [{after[key]} rounds, after the runs]"
        return "" if stats[key].n == runs else f"  [{stats[key].n} of {runs} runs]"
    rows = [(f"{f.label} ({f.unit})", fmt_stat(f.key, stats[f.key]) + note(f.key)) for f in FIGURES if f.key in stats]
    if not rows:
        return []
    width = max(len(name) for name, _ in rows)
    head = f"summary over {runs} run{'s' if runs != 1 else ''} (min / median / max):"
    return [head] + [f"  {name.ljust(width)}  {value}" for name, value in rows]


# -- issue 13's goals ------------------------------------------------------------------

@dataclass(frozen=True)
class GoalRow:
    figure: str
    mine: str
    ceiling: str
    ratio: str
    goal: str
    verdict: str          # "met", "not met", or why it was not judged


NOT_MEASURED = "not measured"
IDLE_GOAL_PARTITIONS = 1000


def _ratio_row(figure: str, key: str, stats: Mapping[str, Stat], ceiling_value: float | None,
               ceiling_s: str, goal: str, ok: Callable[[float], bool]) -> GoalRow:
    """A goal on minibroker's median over a ceiling figure."""
    stat = stats.get(key)
    mine = fmt_stat(key, stat) if stat else "-"
    if stat is None:
        return GoalRow(figure, mine, ceiling_s, "-", goal, NOT_MEASURED)
    if not ceiling_value:
        return GoalRow(figure, mine, ceiling_s, "-", goal, "no ceiling case")
    r = stat.median / ceiling_value
    return GoalRow(figure, mine, ceiling_s, f"{r:.2f}", goal, "met" if ok(r) else "not met")


def _abs_row(figure: str, key: str, stats: Mapping[str, Stat], goal: str, ok: Callable[[float], bool], *,
             ceiling_s: str = "-", ratio_s: str = "-", unjudged: str | None = None) -> GoalRow:
    """A goal on minibroker's median alone."""
    stat = stats.get(key)
    if stat is None:
        return GoalRow(figure, "-", ceiling_s, ratio_s, goal, NOT_MEASURED)
    verdict = unjudged or ("met" if ok(stat.median) else "not met")
    return GoalRow(figure, fmt_stat(key, stat), ceiling_s, ratio_s, goal, verdict)


def goal_rows(stats: Mapping[str, Stat], ceiling: Ceiling | None, *, session_timeout_ms: int | None = None,
              idle_partitions: int = 0) -> list[GoalRow]:
    """Every figure issue 13 sets a goal for, judged on the median over the runs."""
    c_rate: dict[str, float | None] = {}
    c_case: dict[str, str | None] = {}
    for name, prefix in (("blob100", "blob 100 "), ("blob1000", "blob 1000 "), ("awaited", "awaited")):
        case = ceiling.case(prefix) if ceiling else None
        c_case[name] = case
        c_rate[name] = ceiling.rec_s[case] if ceiling and case else None
    aw = c_case["awaited"]
    c_p50 = ceiling.p50_us[aw] / 1000 if ceiling and aw else None
    c_p99 = ceiling.p99_us[aw] / 1000 if ceiling and aw else None

    def cs(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    rows = [
        _ratio_row("batched vs blob 100", "batched_rate", stats, c_rate["blob100"], cs(c_rate["blob100"], ",.0f"),
                   ">= 0.75 x ceiling", lambda r: r >= 0.75),
        _ratio_row("batched vs blob 1000", "batched_rate", stats, c_rate["blob1000"],
                   cs(c_rate["blob1000"], ",.0f"), ">= 0.5 x ceiling", lambda r: r >= 0.5),
        _ratio_row("awaited p50 (ms)", "awaited_p50_ms", stats, c_p50, cs(c_p50, ".3f"), "<= 1.5 x ceiling",
                   lambda r: r <= 1.5),
    ]
    p99 = stats.get("awaited_p99_ms")
    rows.append(_abs_row("awaited p99 (ms)", "awaited_p99_ms", stats, "<= 2 ms", lambda v: v <= 2.0,
                         ceiling_s=cs(c_p99, ".3f"),
                         ratio_s=f"{p99.median / c_p99:.2f}" if p99 and c_p99 else "-"))
    rows.append(_ratio_row("awaited rate", "awaited_rate", stats, c_rate["awaited"], cs(c_rate["awaited"], ",.0f"),
                           ">= 0.6 x ceiling", lambda r: r >= 0.6))
    rows.append(_abs_row("consume", "consume_rate", stats, ">= 1,500,000 records/s", lambda v: v >= 1_500_000))
    batched = stats.get("batched_rate")
    catch = stats.get("catchup_rate")
    rows.append(_abs_row("follower catch-up from zero", "catchup_rate", stats,
                         ">= batched rate" + (f" ({batched.median:,.0f})" if batched else ""),
                         lambda v: batched is not None and v >= batched.median,
                         ratio_s=f"{catch.median / batched.median:.2f}" if catch and batched and batched.median
                         else "-",
                         unjudged=None if batched else "no batched figure"))
    rows.append(_abs_row("end-to-end p99 (ms)", "e2e_p99_ms", stats, "<= 5 ms", lambda v: v <= 5.0))
    few = (f"n/a ({idle_partitions} < {IDLE_GOAL_PARTITIONS} partitions)"
           if idle_partitions < IDLE_GOAL_PARTITIONS else None)
    idle = f"idle {idle_partitions} partitions" if idle_partitions else "idle partitions"
    rows.append(_abs_row(f"{idle} CPU (%)", "idle_cpu_pct", stats,
                         "<= 2 % of a core per broker", lambda v: v <= 2.0, unjudged=few))
    rss = stats.get("idle_rss_mib")
    rows.append(_abs_row(f"{idle} RSS (MiB)", "idle_rss_mib", stats,
                         "<= 100 MB (95.4 MiB) per broker", lambda v: v * 1.048576 <= 100.0,
                         unjudged=few if rss else None))
    rr = stats.get("rr_ratio")
    rows.append(_abs_row(f"{idle} / 1 partition (x)", "multi_ratio", stats,
                         ">= 0.8 (sticky runs" + (f"; round robin {rr.median:.2f})" if rr else ")"),
                         lambda v: v >= 0.8, unjudged=few if stats.get("multi_ratio") else None))
    limit = None if session_timeout_ms is None else session_timeout_ms + 1000
    rows.append(_abs_row("failover gap (ms)", "failover_ms", stats,
                         f"<= session timeout + 1 s ({limit:,} ms)" if limit else "<= session timeout + 1 s",
                         lambda v: limit is not None and v <= limit,
                         unjudged=None if limit else "session timeout unknown"))
    rows.append(_abs_row("confluent-kafka / minibroker", "confluent_ratio", stats, ">= 0.8", lambda v: v >= 0.8))
    return rows


def goal_table(rows: Sequence[GoalRow], runs: int) -> list[str]:
    """A compact fixed-width table of the goal rows, with a closing count of goals met."""
    head = GoalRow("figure", "minibroker" + (" (min / median / max)" if runs > 1 else ""), "ceiling", "ratio",
                   "issue-13 goal", "verdict")
    cols = [[getattr(r, f) for r in (head, *rows)] for f in ("figure", "mine", "ceiling", "ratio", "goal", "verdict")]
    widths = [max(len(v) for v in col) for col in cols]
    lines = [f"issue 13 goals (verdicts from the median of {runs} run{'s' if runs != 1 else ''}):"]
    for i in range(len(rows) + 1):
        cells = [col[i].rjust(w) if j in (1, 2, 3) else col[i].ljust(w)
                 for j, (col, w) in enumerate(zip(cols, widths, strict=True))]
        lines.append("  " + "  ".join(cells).rstrip())
        if i == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    met = sum(r.verdict == "met" for r in rows)
    judged = sum(r.verdict in ("met", "not met") for r in rows)
    lines.append(f"  {met} of {judged} judged goals met ({len(rows) - judged} not judged)")
    return lines
