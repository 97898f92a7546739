"""`make profile`: where a review's time goes, with the server under wrk load.

The server runs under pyinstrument (a sampling profiler) on core 0 with the mixed 4-16 KB
reviews at 64 connections from wrk on core 1, as `make bench` loads it; the call tree is printed
(and written as HTML next to bench's results). Run it on the compiled core (make compiled) to see
what is left outside the rules: TLS, HTTP parsing (llhttp), JSON, response building, metrics.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.__main__ import RESULTS
from bench.load import LOAD_CPU, SERVER_CPU, closed_loop, free_port, server
from bench.reviews import bodies
from webhook import certs, core_build


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.profile")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--endpoint", default="validate", choices=("validate", "mutate"))
    p.add_argument("--pure", action="store_true", help="profile the pure Python core")
    args = p.parse_args(argv)
    env = {**os.environ, **({"GPU_POLICY_PURE": "1"} if args.pure else {})}
    RESULTS.mkdir(parents=True, exist_ok=True)
    html = RESULTS / f"profile-{args.endpoint}-{'pure' if args.pure else 'compiled'}.html"
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        certs.write(certs.generate("gpu-policy", "gpu-policy", extra_hosts=("localhost", "127.0.0.1")), tmp / "certs")
        files = []
        for name, body in bodies().items():
            (tmp / f"{name}.json").write_bytes(body)
            files.append(tmp / f"{name}.json")
        config = tmp / "config.yaml"
        config.write_text(
            yaml.safe_dump({"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "nvidia-t4"}})
        )
        port = free_port()
        text = tmp / "profile.txt"
        cmd = [
            sys.executable, "-m", "pyinstrument", "--interval", "0.0005", "-r", "text", "--show-all",
            "-o", str(text), "-m", "webhook", "--log-level", "warning", "serve", "--config", str(config),
            "--cert-dir", str(tmp / "certs"), "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0",
        ]  # fmt: skip
        build = "pure Python" if args.pure else core_build()
        print(f"profiling /{args.endpoint} ({build}) for {args.seconds:g} s at 64 connections")
        with server(cmd, port, SERVER_CPU, tmp / "certs" / "ca.crt", env):
            r = closed_loop(f"https://127.0.0.1:{port}/{args.endpoint}", files, 64, args.seconds, LOAD_CPU)
        deadline = time.monotonic() + 20
        while not text.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        print(f"{r['rps']} req/s under the profiler")
        report = text.read_text() if text.exists() else "(no profile written)"
        print(report[:12000])
        html.write_text(f"<pre>{report}</pre>")
    print(f"wrote {html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
