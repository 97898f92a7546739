"""`make bench`: gpu-policy over TLS with keep-alive, side by side with the bare aiohttp limit.

Each server runs as its own process pinned to core 0 and the load generator to core 1 (on
this 2-core machine). Closed loop at fixed concurrency uses wrk (rotating realistic reviews);
open loop at fixed offered rates uses h2load --h1 --rps, so latency is not flattered by
coordinated omission. Where those tools are missing an aiohttp client stands in (slower, and
said so in the output). Results: bench/results/latest.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from bench import cel_compare, core
from bench.plot import plot
from bench.reviews import bodies
from webhook import certs, core_build

from .cluster import view_latency, view_servers
from .load import LOAD_CPU, SERVER_CPU, closed_loop, cpu_seconds, free_port, h2load, peak_rss_mb, server

HERE = Path(__file__).resolve().parent


RESULTS = HERE / "results"


CONCURRENCY = (1, 8, 32, 64)


PER_POD = ("cpu-small", "cpu-web", "gpu-mutated", "gpu-denied", "gpu-big", "gpu-3c")


RATES = (200, 500, 1000)


def measure(name: str, url: str, pid: int, files: list[Path], rate_body: Path, seconds: float) -> dict[str, Any]:
    print(f"  {name}: ", end="", flush=True)
    result: dict[str, Any] = {"concurrency": {}, "rates": {}}
    closed_loop(url, files, 8, 1.0, LOAD_CPU)  # warm-up
    for c in CONCURRENCY:
        cpu_before = cpu_seconds(pid)
        r = closed_loop(url, files, c, seconds, LOAD_CPU)
        r["cpu_ms_per_1000"] = round((cpu_seconds(pid) - cpu_before) / max(r["requests"], 1) * 1e6, 1)
        result["concurrency"][c] = r
        print(f"c{c}={r['rps']}/s ", end="", flush=True)
    result["per_pod"] = {}
    for f in files:
        if f.stem in PER_POD:
            r = closed_loop(url, [f], 64, seconds, LOAD_CPU)
            result["per_pod"][f.stem] = r
    print("per-pod done ", end="", flush=True)
    if shutil.which("h2load"):
        for rate in RATES:
            result["rates"][rate] = h2load(url, rate_body, rate, seconds, LOAD_CPU, pid)
            print(f"r{rate}:p99={result['rates'][rate]['p99_ms']}ms ", end="", flush=True)
    result["peak_rss_mb"] = peak_rss_mb(pid)
    print()
    return result


def head_to_head(
    urls: dict[str, str], pids: dict[str, int], files: list[Path], rounds: int, seconds: float
) -> dict[str, Any]:
    """The targets' ratio to bare, measured the way a noisy machine allows: every server stays up
    (pinned to the same core, idle but for the one under load), and each round measures them all
    back to back at 64 connections on the mixed reviews, in an order that alternates between
    rounds. A round's ratio compares figures taken seconds apart; the median over rounds is the
    figure the targets are judged by. (Bare alone moves by 20% between runs minutes apart here.)"""
    names = list(urls)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    print(f"  head to head, {rounds} rounds: ", end="", flush=True)
    for n in names:
        closed_loop(urls[n], files, 8, 1.0, LOAD_CPU)  # warm-up
    for k in range(rounds):
        for n in names if k % 2 == 0 else names[::-1]:
            cpu_before = cpu_seconds(pids[n])
            r = closed_loop(urls[n], files, 64, seconds, LOAD_CPU)
            r["cpu_us_per_review"] = round((cpu_seconds(pids[n]) - cpu_before) / max(r["requests"], 1) * 1e6, 1)
            runs[n].append(r)
        print(f"{k + 1} ", end="", flush=True)
    print()
    out: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "targets": {}}
    for n in names:
        ratios = [r["rps"] / b["rps"] for r, b in zip(runs[n], runs["bare"], strict=True)]
        out["targets"][n] = {
            "rps": [r["rps"] for r in runs[n]],
            "cpu_us_per_review": [r["cpu_us_per_review"] for r in runs[n]],
            "ratios": [round(x, 3) for x in ratios],
            "median_ratio": round(statistics.median(ratios), 3),
            "median_cpu_us": statistics.median(r["cpu_us_per_review"] for r in runs[n]),
        }
    return out


def ratio(value: float, limit: float) -> str:
    return f"{value / limit:.2f}" if limit else "n/a"


def report_head_to_head(h2h: dict[str, Any]) -> str:
    lines = [
        f"Head to head (the targets' figure): 64 connections, mixed reviews, {h2h['rounds']} rounds of "
        f"{h2h['seconds']:g} s, servers measured back to back in alternating order"
    ]
    for n, r in h2h["targets"].items():
        lines.append(
            f"  {n:18} median x{r['median_ratio']:.2f}  rounds {' '.join(f'x{x:.2f}' for x in r['ratios'])}"
            f"  req/s {' '.join(map(str, r['rps']))}  CPU {r['median_cpu_us']:.1f} us/review"
        )
    return "\n".join(lines)


def report(results: dict[str, Any]) -> str:
    t = results["targets"]
    names = list(t)
    bare = t["bare"]
    lines = ["", f"machine: {results['machine']}", f"load: {results['load_tools']}", ""]
    lines.append("Closed loop (wrk, keep-alive, rotating 4-16 KB reviews): req/s, p50/p99 ms, ratio of req/s to bare")
    lines.append(f"{'conns':>6} " + " ".join(f"{n:>30}" for n in names))
    for c in CONCURRENCY:
        cells = []
        for n in names:
            r = t[n]["concurrency"][c]
            cells.append(
                f"{r['rps']:>6} {r['p50_ms']:5.2f}/{r['p99_ms']:5.2f} x{ratio(r['rps'], bare['concurrency'][c]['rps'])}"
            )
        lines.append(f"{c:>6} " + " ".join(f"{x:>30}" for x in cells))
    h2h = results.get("head_to_head")
    if h2h:
        lines += ["", report_head_to_head(h2h)]
    lines += ["", "Saturation by pod (64 connections, one review repeated): req/s and ratio to bare"]
    lines.append(f"{'pod':>12} " + " ".join(f"{n:>24}" for n in names))
    for pod_name in PER_POD:
        limit = bare["per_pod"][pod_name]["rps"]
        cells = [
            f"{t[n]['per_pod'][pod_name]['rps']:>7} x{ratio(t[n]['per_pod'][pod_name]['rps'], limit)}" for n in names
        ]
        lines.append(f"{pod_name:>12} " + " ".join(f"{x:>24}" for x in cells))
    if bare["rates"]:
        lines += ["", "Open loop (h2load --h1 --rps, 10 connections, 6 KB GPU pod review): p50/p90/p99/max ms"]
        lines.append(f"{'rate':>6} " + " ".join(f"{n:>34}" for n in names))
        for rate in RATES:
            cells = []
            for n in names:
                r = t[n]["rates"][rate]
                cells.append(f"{r['p50_ms']:.2f}/{r['p90_ms']:.2f}/{r['p99_ms']:.2f}/{r['max_ms']:.1f}")
            lines.append(f"{rate:>6} " + " ".join(f"{x:>34}" for x in cells))
        lines += ["", "CPU ms per 1,000 reviews at 1,000 req/s offered; peak RSS"]
        for n in names:
            r = t[n]["rates"][1000]
            x = ratio(r["cpu_ms_per_1000"], bare["rates"][1000]["cpu_ms_per_1000"])
            lines.append(f"  {n:28} {r['cpu_ms_per_1000']:7.1f} ms   (x{x})   RSS {t[n]['peak_rss_mb']} MB")
    if results.get("workers"):
        w = results["workers"]
        lines += ["", "Workers (unpinned; load generator shares the 2 cores), /validate at 64 connections:"]
        for k, r in w.items():
            lines.append(f"  {k:28} {r['rps']:>7} req/s  p99 {r['p99_ms']:.2f} ms")
    lines += ["", "Policy core alone (view + all rules + all mutations), median us per pod"]
    cel = results.get("cel")
    lines[-1] += "; the four core rules as one CEL program (cel-cpp) for comparison:" if cel else ":"
    builds = list(results["core"])
    lines.append(f"  {'pod':22} " + " ".join(f"{b:>10}" for b in builds))
    for k in results["core"][builds[0]]:
        cells = " ".join(f"{results['core'][b][k]['median_us']:10.2f}" for b in builds)
        cel_text = f"   CEL {cel[k]['median_us']:8.2f}" if cel and k in cel else ""
        lines.append(f"  {k:22} {cells}{cel_text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench")
    p.add_argument("--seconds", type=float, default=6.0, help="duration of each measurement")
    p.add_argument("--quick", action="store_true", help="2-second measurements (a smoke run)")
    p.add_argument("--no-workers", action="store_true", help="skip the 1 vs 2 worker comparison")
    p.add_argument("--rounds", type=int, help="alternating head-to-head rounds (default 7, --quick 2; 0: none)")
    p.add_argument(
        "--against",
        metavar="DIR",
        help="another checkout of gpu-policy (built as it builds, e.g. `git worktree add /tmp/before REV` and "
        "its own `make compiled`) whose server joins the head-to-head rounds as `before`",
    )
    p.add_argument(
        "--head-to-head-only",
        action="store_true",
        help="only the head-to-head rounds (the targets' figure; a quick A/B while tuning the request path)",
    )
    p.add_argument(
        "--namespaces",
        type=int,
        default=0,
        metavar="N",
        help="also head to head with a cluster view (a stand-in API server: the tests' node table and N namespaces), "
        "the server with and without the access rules that watch namespaces (as warn)",
    )
    p.add_argument(
        "--review",
        choices=PER_POD,
        help="the head-to-head rounds on this one review instead of the mix (issue 48: /mutate of gpu-3c against "
        "the commit of December 1)",
    )
    p.add_argument("--out", default=str(RESULTS / "latest.json"))
    args = p.parse_args(argv)
    seconds = 2.0 if args.quick else args.seconds
    rounds = args.rounds if args.rounds is not None else 2 if args.quick else 7

    tools = ", ".join(t for t in ("wrk", "h2load") if shutil.which(t)) or "aiohttp client (wrk/h2load missing)"
    results: dict[str, Any] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.platform()}",
        "load_tools": tools,
        "seconds": seconds,
        "targets": {},
    }
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        certs.write(certs.generate("gpu-policy", "gpu-policy", extra_hosts=("localhost", "127.0.0.1")), tmp / "certs")
        files = []
        for name, body in bodies().items():
            path = tmp / f"{name}.json"
            path.write_bytes(body)
            files.append(path)
        rate_body = tmp / "gpu-mutated.json"
        config = tmp / "config.yaml"
        config.write_text(
            yaml.safe_dump({"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "nvidia-t4"}})
        )
        ca = tmp / "certs" / "ca.crt"
        py = sys.executable

        def bare_cmd(port: int) -> list[str]:
            return [py, "-m", "bench.bare", "--cert-dir", str(tmp / "certs"), "--port", str(port)]

        def policy_cmd(port: int, workers: int = 1, config: Path = config) -> list[str]:
            return [
                py,
                "-m",
                "webhook",
                "--log-level",
                "warning",
                "serve",
                "--config",
                str(config),
                "--cert-dir",
                str(tmp / "certs"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
            ]

        print(f"bench: {seconds:g} s per measurement, tools: {tools}")
        # The compiled core (make compiled) and pure Python side by side, in one run.
        builds = {"pure": {**os.environ, "GPU_POLICY_PURE": "1"}}
        if core_build().startswith("compiled"):
            builds = {"compiled": {k: v for k, v in os.environ.items() if k != "GPU_POLICY_PURE"}, **builds}
        else:
            print(f"bench: no compiled core ({core_build()}); `make compiled` adds it to the comparison")
        results["builds"] = list(builds)
        full = not args.head_to_head_only
        if full:
            port = free_port()
            with server(bare_cmd(port), port, SERVER_CPU, ca) as proc:
                results["targets"]["bare"] = measure(
                    "bare", f"https://127.0.0.1:{port}/validate", proc.pid, files, rate_body, seconds
                )
        for build, env in builds.items() if full else ():
            port = free_port()
            with server(policy_cmd(port), port, SERVER_CPU, ca, env) as proc:
                for endpoint in ("validate", "mutate"):
                    results["targets"][f"{build} /{endpoint}"] = measure(
                        f"{build} /{endpoint}",
                        f"https://127.0.0.1:{port}/{endpoint}",
                        proc.pid,
                        files,
                        rate_body,
                        seconds,
                    )
        if rounds > 0 or not full:
            # Last, with every server up at once: bare, and the compiled build's two routes.
            build = next(iter(builds))
            with ExitStack() as stack:
                ports = {"bare": free_port(), build: free_port()}
                bare_proc = stack.enter_context(
                    server(
                        bare_cmd(ports["bare"]),
                        ports["bare"],
                        SERVER_CPU,
                        ca,
                    )
                )
                ours = stack.enter_context(
                    server(policy_cmd(ports[build]), ports[build], SERVER_CPU, ca, builds[build])
                )
                urls = {
                    "bare": f"https://127.0.0.1:{ports['bare']}/validate",
                    f"{build} /validate": f"https://127.0.0.1:{ports[build]}/validate",
                    f"{build} /mutate": f"https://127.0.0.1:{ports[build]}/mutate",
                }
                pids = {"bare": bare_proc.pid, f"{build} /validate": ours.pid, f"{build} /mutate": ours.pid}
                if args.namespaces:
                    view_servers(stack, tmp, args.namespaces, policy_cmd, builds[build], ca, urls, pids)
                if args.against:  # `python -m webhook` from that checkout: its own sources, this venv
                    ports["before"] = free_port()
                    before = stack.enter_context(
                        server(policy_cmd(ports["before"]), ports["before"], SERVER_CPU, ca, cwd=args.against)
                    )
                    for endpoint in ("validate", "mutate"):
                        urls[f"before /{endpoint}"] = f"https://127.0.0.1:{ports['before']}/{endpoint}"
                        pids[f"before /{endpoint}"] = before.pid
                chosen = [f for f in files if f.stem == args.review] if args.review else files
                results["head_to_head"] = head_to_head(urls, pids, chosen, max(rounds, 1), max(2.0, seconds / 2))
                if args.namespaces and shutil.which("h2load"):
                    views = {n: u for n, u in urls.items() if n.startswith("view")}
                    results["view_latency"] = view_latency(views, pids, rate_body, max(rounds, 1), seconds)
        if not full:
            text = report_head_to_head(results["head_to_head"])
            for n, r in results.get("view_latency", {}).items():
                text += f"\n  {n:18} at 1,000 req/s: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms (median of rounds)"
            print(text)
            return 0
        if not args.no_workers:
            results["workers"] = {}
            for workers in (1, 2):
                port = free_port()
                with server(policy_cmd(port, workers), port, None, ca):
                    closed_loop(f"https://127.0.0.1:{port}/validate", files, 8, 1.0, None)
                    results["workers"][f"gpu-policy --workers {workers}"] = closed_loop(
                        f"https://127.0.0.1:{port}/validate", files, 64, seconds, None
                    )
        results["core"] = {build: core.run_elsewhere(build == "pure", quick=args.quick) for build in builds}
        results["cel"] = cel_compare.run(quick=args.quick)

    text = report(results)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    out.with_suffix(".txt").write_text(text + "\n")
    png = plot(results, out.with_suffix(".png"))
    print(f"\nwrote {out}, {out.with_suffix('.txt')}" + (f" and {png}" if png else " (no plot: matplotlib missing)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
