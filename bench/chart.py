"""A chart beside each results table: the markdown table `publish` writes, drawn as grouped
bars (plait and each peer per workload, in the table's unit), saved as PNG next to it.

    python bench/chart.py bench/results_matmul.md [more.md ...]   # -> results_matmul.png

matplotlib is the `bench` extra; without it the benchmarks still write their tables.
"""
from __future__ import annotations

import sys
from pathlib import Path

# Columns that are ratios or spreads, not figures of a contender.
_DERIVED = (" / ", "spread")


def parse_table(text: str) -> tuple[str, str, list[str], list[tuple[str, list[float | None]]]]:
    """(stamp line, unit, contenders, [(workload, figure per contender)]) of the first
    markdown table in `text`; '-' cells are None."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    stamp = lines[0] if not lines[0].startswith("|") else ""
    rows = [ln for ln in lines if ln.startswith("|")]
    if len(rows) < 3:
        raise ValueError("no markdown table with a header and rows")
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    keep = [i for i, c in enumerate(head[1:], 1) if not any(d in c for d in _DERIVED)]
    first = head[keep[0]].split()
    unit = first[-1] if len(first) > 1 else ""
    contenders = [head[i].split()[0] for i in keep]
    data = []
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        data.append((cells[0], [None if cells[i] in ("-", "") else float(cells[i])
                                 for i in keep]))
    return stamp, unit, contenders, data


def draw(md: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    stamp, unit, contenders, data = parse_table(md.read_text())
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(data)), 4.2))
    width = 0.8 / len(contenders)
    for j, who in enumerate(contenders):
        xs = [i + (j - (len(contenders) - 1) / 2) * width for i in range(len(data))]
        ys = [row[1][j] if row[1][j] is not None else 0.0 for row in data]
        ax.bar(xs, ys, width, label=who)
    ax.set_xticks(range(len(data)), [row[0] for row in data], rotation=25, ha="right",
                  fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(stamp, fontsize=7)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = md.with_suffix(".png")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def chart_if_possible(out: str | None) -> None:
    """Called by the benchmarks after writing `out`: the chart when matplotlib is there."""
    if not out:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("(no chart: pip install 'plait[bench]' for matplotlib)")
        return
    print(f"chart: {draw(Path(out))}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(draw(Path(arg)))
