"""`make bench-native`: what each enforcement mode costs a pod create, in a REAL kube-apiserver v1.36.

Issue 35's bound: native mode must cost no more than webhook mode. The API server's time to admit a
pod (a dry-run create of a GPU trainer with a sidecar, through its own defaulting, validation and
admission) is measured with nothing of ours, with isolation's MutatingAdmissionPolicy, with that
MAP and the rules' ValidatingAdmissionPolicies (enforcement native's in-process part), and with our
two webhooks (enforcement webhook, served by a real `gpu-policy serve` on loopback).

Why here and not in a test: a loaded machine's noise is larger than the differences (one CI run had
the webhooks at +0.8 ms and the MAP at +4.7 ms, another the opposite). So the configurations take
turns, round after round, and the report is the median of each one's per-round medians, as
`make bench` reports only ratios from one run. Skipped (exit 0, said so) where the real API server
is not in $KUBE136_BIN (tests/realapi.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.chart import render
from tests.helpers import Server
from tests.realapi import RealApi, available, running, webhook_configs
from webhook import certs

RESULTS = Path(__file__).resolve().parent / "results"
CUDA = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
MAP = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
VAP = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
WEBHOOKS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _pod(*containers: dict[str, Any]) -> dict[str, Any]:
    meta = {"generateName": "bench-", "namespace": "ml"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": list(containers)}}


TRAINER = _pod(
    {"name": "trainer", "image": CUDA, "resources": {"limits": {"nvidia.com/gpu": 1}}},
    {"name": "sidecar", "image": CUDA},
)
PROBE = _pod({"name": "probe", "image": CUDA})  # a CPU pod: isolation voids it
ATTACK = _pod(  # a GPU container that names its own devices: every mode refuses it
    {
        "name": "attack",
        "image": CUDA,
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
    }
)


def _until(real_api: RealApi, voided: bool, refused: bool) -> None:
    """Until the configuration in place shows: a CPU probe voided or not, the attack refused or not."""
    deadline = time.monotonic() + 30
    while True:
        code, body, _ = real_api.create_pod(PROBE)
        is_voided = code == 201 and bool(body["spec"]["containers"][0].get("env"))
        is_refused = real_api.create_pod(ATTACK)[0] == 403
        if is_voided == voided and is_refused == refused:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the configuration never took effect: voided {is_voided}, refused {is_refused}")
        time.sleep(0.2)


def _p50(real_api: RealApi, creates: int) -> float:
    took = []
    for _ in range(creates):
        started = time.perf_counter()
        code, body, _ = real_api.create_pod(TRAINER)
        took.append(time.perf_counter() - started)
        if code != 201:
            raise RuntimeError(f"the trainer was refused: {body}")
    return statistics.median(took)


def measure(real_api: RealApi, configs: dict[str, list[dict[str, Any]]], rounds: int, creates: int) -> dict[str, Any]:
    """Each configuration installed in turn, `rounds` times over; per round, the p50 of `creates`."""
    per_round: dict[str, list[float]] = {name: [] for name in configs}
    for n in range(rounds):
        for name, docs in configs.items():
            kinds = tuple(dict.fromkeys(d["kind"] for d in docs))
            created = real_api.create_all(docs, kinds)
            try:
                _until(real_api, voided=bool(docs), refused=any(d["kind"] not in MAP for d in docs))
                _p50(real_api, max(creates // 5, 3))  # warm: the API server compiles a new policy lazily
                per_round[name].append(_p50(real_api, creates))
            finally:
                for path in reversed(created):
                    real_api.call("DELETE", path)
            _until(real_api, voided=False, refused=False)
        print(
            f"bench-native: round {n + 1}/{rounds}: "
            + ", ".join(f"{k} {v[-1] * 1000:.1f} ms" for k, v in per_round.items())
        )
    p50 = {name: statistics.median(v) for name, v in per_round.items()}
    base = p50["nothing of ours"]
    added = {name: v - base for name, v in p50.items()}
    return {"rounds": rounds, "creates": creates, "per_round_s": per_round, "p50_s": p50, "added_s": added}


def report(results: dict[str, Any]) -> str:
    added = results["added_s"]
    lines = [
        f"p50 of a dry-run pod create, median of {results['rounds']} rounds of {results['creates']}:",
        *(f"  {name:<34} {p * 1000:7.2f} ms  (+{added[name] * 1000:.2f})" for name, p in results["p50_s"].items()),
    ]
    hooks = added["our two webhooks"]
    if hooks > 0:
        for name in ("isolation's MAP", "the MAP and the rules' VAPs"):
            lines.append(f"  {name} costs {added[name] / hooks:.2f}x what the webhooks add")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.native", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="turns each configuration takes (default 5)")
    p.add_argument("--creates", type=int, default=60, help="timed creates per configuration per round")
    p.add_argument("--out", default=str(RESULTS / "native-latest.json"))
    args = p.parse_args(argv)
    if not available():
        print("bench-native: no real kube-apiserver here (kube-apiserver and etcd v1.36 in $KUBE136_BIN): skipped")
        return 0
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "api").mkdir()
        certs.write(certs.generate("gpu-policy", "gpu-policy", extra_hosts=("127.0.0.1",)), tmp / "certs")
        both = render({"enforcement": "both"}, kube_version="1.36.0", tmp=tmp)
        webhook = render({"enforcement": "webhook"}, kube_version="1.36.0", tmp=tmp)
        assert isinstance(both, list) and isinstance(webhook, list)
        server = Server(tmp / "certs", {"clusterVersion": "1.36"}, tmp, [], ("gpu-policy", "gpu-policy"))
        try:
            hooks = webhook_configs(webhook, server.port, (tmp / "certs" / "ca.crt").read_bytes())
            configs = {
                "nothing of ours": [],
                "isolation's MAP": [d for d in both if d["kind"] in MAP],
                "the MAP and the rules' VAPs": [d for d in both if d["kind"] in MAP + VAP],
                "our two webhooks": hooks,
            }
            with running(tmp / "api") as real_api:
                results = measure(real_api, configs, args.rounds, args.creates)
        finally:
            server.stop()
    results["policies"] = {name: len(docs) for name, docs in configs.items()}
    print(report(results))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"bench-native: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
