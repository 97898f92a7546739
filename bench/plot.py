"""bench/results/latest.png: latency against offered load, and throughput against connections."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(results: dict[str, Any], out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    targets = results["targets"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (name, t) in enumerate(targets.items()):
        color = f"C{i}"  # one colour per server in both panels
        # Keys are ints in memory and strings once read back from the JSON file.
        by_rate = {int(k): v for k, v in t.get("rates", {}).items()}
        by_conns = {int(k): v for k, v in t["concurrency"].items()}
        rates = sorted(by_rate)
        if rates:
            left.plot(rates, [by_rate[r]["p99_ms"] for r in rates], marker="o", color=color, label=f"{name} p99")
            left.plot(
                rates,
                [by_rate[r]["p50_ms"] for r in rates],
                marker=".",
                linestyle="--",
                color=color,
                label=f"{name} p50",
            )
        conns = sorted(by_conns)
        right.plot(conns, [by_conns[c]["rps"] for c in conns], marker="o", color=color, label=name)
    left.set(title="Open loop (h2load): latency vs offered load", xlabel="offered req/s", ylabel="ms")
    right.set(title="Closed loop (wrk): throughput vs connections", xlabel="connections", ylabel="req/s", xscale="log")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(results["machine"], fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
