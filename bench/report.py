"""The one table every benchmark prints: plait beside its peers, stamped with date,
GPU, versions and the copy figure of the same run."""
import datetime

import torch
import triton

PEERS = ("torch", "torch.compile", "triton")


def peer_table(rows, copy_gbs: float, how: str, extra: str | None = None) -> str:
    """rows: (workload, {contender: GB/s}, extra cell or None) for plait and PEERS."""
    head = "| workload | plait GB/s | " + " | ".join(PEERS) + " | plait / best peer | plait / copy |"
    lines = [head + (f" {extra} |" if extra else ""),
             "|---" * (4 + len(PEERS) + (1 if extra else 0)) + "|"]
    for name, gbs, cell in rows:
        best = max(gbs[p] for p in PEERS)
        line = (f"| {name} | {gbs['plait']:.0f} | " + " | ".join(f"{gbs[p]:.0f}" for p in PEERS)
                + f" | {gbs['plait'] / best:.2f} | {gbs['plait'] / copy_gbs:.2f} |")
        lines.append(line + (f" {cell} |" if extra else ""))
    stamp = (f"{datetime.date.today()} · {torch.cuda.get_device_name()} · torch {torch.__version__}"
             f" · triton {triton.__version__} · copy {copy_gbs:.0f} GB/s · bf16 · {how}")
    return stamp + "\n\n" + "\n".join(lines)


def publish(table: str, out: str | None) -> None:
    """Print the table; with `out`, write it there and its chart beside it (bench/chart.py)."""
    print(table)
    if out:
        with open(out, "w") as fh:
            fh.write(table + "\n")
        from chart import chart_if_possible
        chart_if_possible(out)
