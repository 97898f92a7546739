"""The measuring tools of `make bench`: servers started pinned to one core and stopped, their CPU
time and peak RSS read from /proc, and load from another core: wrk (closed loop, keep-alive, the
mixed reviews), h2load (a fixed request rate, each request's latency), or aiohttp's client when
neither is installed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

SERVER_CPU, LOAD_CPU = 0, 1


CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pin(cpu: int | None) -> Any:
    if cpu is None or (os.cpu_count() or 1) < 2:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def _family(pid: int) -> list[int]:
    """The process and its children (the pre-forked workers)."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        pids += [int(p) for p in task.read_text().split()]
    return pids


def cpu_seconds(pid: int) -> float:
    total = 0
    for p in _family(pid):
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / CLK_TCK


def peak_rss_mb(pid: int) -> float:
    kb = 0
    for p in _family(pid):
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                kb += int(line.split()[1])
    return round(kb / 1024, 1)


@contextmanager
def server(
    cmd: list[str], port: int, cpu: int | None, ca: Path, env: dict[str, str] | None = None, cwd: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_pin(cpu),
        env=env or dict(os.environ),
        cwd=cwd,
    )
    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + 20
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd} exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                with (
                    socket.create_connection(("127.0.0.1", port), 1) as sock,
                    ctx.wrap_socket(sock, server_hostname="localhost"),
                ):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        time.sleep(0.3)  # let pre-forked workers all bind
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)  # SIGTERM would drain first
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _taskset(cpu: int | None) -> list[str]:
    return (
        ["taskset", "-c", str(cpu)] if cpu is not None and shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []
    )


def wrk(url: str, files: list[Path], conns: int, seconds: float, cpu: int | None) -> dict[str, Any]:
    cmd = [
        *_taskset(cpu),
        "wrk",
        "-t1",
        f"-c{conns}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(HERE / "wrk.lua"),
        url,
        "--",
        *map(str, files),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    line = next(x for x in out.splitlines() if x.startswith("WRK "))
    f = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    return {
        "rps": round(f["requests"] / (f["duration_us"] / 1e6)),
        "p50_ms": f["p50"] / 1000,
        "p90_ms": f["p90"] / 1000,
        "p99_ms": f["p99"] / 1000,
        "max_ms": f["max"] / 1000,
        "errors": f["status_errors"] + f["io_errors"],
        "requests": f["requests"],
    }


def _percentiles(latencies_us: list[int]) -> dict[str, float]:
    latencies_us.sort()
    n = len(latencies_us)

    def pct(p: float) -> float:
        return latencies_us[min(n - 1, int(p * n))] / 1000 if n else float("nan")

    return {
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": latencies_us[-1] / 1000 if n else 0,
    }


def h2load(url: str, body: Path, rate: int, seconds: float, cpu: int | None, pid: int) -> dict[str, Any]:
    clients = 10
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        cpu_before = cpu_seconds(pid)
        cmd = [
            *_taskset(cpu),
            "h2load",
            "--h1",
            "-t1",
            f"-c{clients}",
            f"--rps={rate / clients:g}",
            f"-D{seconds:g}",
            "-d",
            str(body),
            "-H",
            "Content-Type: application/json",
            f"--log-file={log.name}",
            url,
        ]
        subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 60)
        cpu_used = cpu_seconds(pid) - cpu_before
        rows = [line.split("\t") for line in Path(log.name).read_text().splitlines() if line]
    ok = [int(r[2]) for r in rows if r[1] == "200"]
    return {
        "offered_rps": rate,
        "achieved_rps": round(len(ok) / seconds),
        "errors": len(rows) - len(ok),
        "cpu_ms_per_1000": round(cpu_used / max(len(rows), 1) * 1e6, 1),
        **_percentiles(ok),
    }


async def _aiohttp_closed(url: str, payloads: list[bytes], conns: int, seconds: float) -> dict[str, Any]:
    import aiohttp

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    latencies: list[int] = []
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=conns)) as session:

        async def worker(offset: int) -> None:
            i = offset
            while time.monotonic() < deadline:
                start = time.perf_counter_ns()
                async with session.post(
                    url, data=payloads[i % len(payloads)], headers={"Content-Type": "application/json"}
                ) as resp:
                    await resp.read()
                latencies.append((time.perf_counter_ns() - start) // 1000)
                i += 1

        await asyncio.gather(*(worker(k) for k in range(conns)))
    return {"rps": round(len(latencies) / seconds), "errors": 0, "requests": len(latencies), **_percentiles(latencies)}


def closed_loop(url: str, files: list[Path], conns: int, seconds: float, cpu: int | None) -> dict[str, Any]:
    if shutil.which("wrk"):
        return wrk(url, files, conns, seconds, cpu)
    return asyncio.run(_aiohttp_closed(url, [f.read_bytes() for f in files], conns, seconds))
