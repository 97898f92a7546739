"""`gpu-policy`: argument parsing and dispatch. Each command lives in its own module:
serve (runner, drain, workers), offline (check and mutate), cluster (audit, check --cluster), certs."""

from __future__ import annotations

import argparse
import os
import sys

from .. import core_build, logs, package_version
from ..config import ConfigError
from ..reports import EXIT_INPUT
from . import certs, cluster, offline, serve


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-policy", description="GPU admission policy for Kubernetes")
    p.add_argument("--log-level", default=os.environ.get("GPU_POLICY_LOG_LEVEL", "info"))
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("GPU_POLICY_LOG_FORMAT", "text"),
        help="text for people; json (one object per line) for log pipelines, the chart's default",
    )
    p.add_argument(
        "--version", action="version", version=f"gpu-policy {package_version()} (policy core: {core_build()})"
    )
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the HTTPS admission webhook")
    s.add_argument("--config", help="YAML config file (default: built-in defaults)")
    s.add_argument("--cert-dir", required=True, help="folder with tls.crt and tls.key")
    s.add_argument("--host", default="0.0.0.0", help="address of the HTTPS port (default: %(default)s)")
    s.add_argument("--port", type=int, default=8443, help="the HTTPS port: reviews and probes (default: %(default)s)")
    s.add_argument("--workers", type=int, default=1, help="processes sharing the port (SO_REUSEPORT)")
    s.add_argument(
        "--metrics-port",
        type=int,
        default=9090,
        help="plain-HTTP /metrics (all workers summed) and probes; 0: no /metrics at all (default: %(default)s)",
    )
    s.add_argument(
        "--metrics-host",
        help="address of the metrics port, e.g. 127.0.0.1 behind a scraping sidecar (default: --host)",
    )
    s.add_argument("--cluster-version", help="override clusterVersion (e.g. 1.27, unknown)")
    s.set_defaults(func=serve.command)

    for name, func, text in (
        ("check", offline.check, "judge manifests offline, as the validating webhook would"),
        ("mutate", offline.mutate, "print manifests as the mutating webhook would change them"),
    ):
        c = sub.add_parser(name, help=text)
        c.add_argument("-f", "--file", action="append", required=True, help="file, folder or - (repeatable)")
        c.add_argument("--config", help="YAML config file (default: built-in defaults)")
        c.add_argument(
            "--values",
            help="a Helm values file of the gpu-policy chart: judge exactly as that installed chart would",
        )
        c.add_argument(
            "--release-namespace", default="gpu-policy", help="with --values: the chart's namespace (always exempt)"
        )
        c.add_argument("--cluster-version", help="cluster version for version-gated mutations (e.g. 1.27)")
        c.add_argument(
            "-n",
            "--namespace",
            help="namespace for objects without one (default: default); a different explicit one is an error",
        )
        c.add_argument(
            "-o",
            "--output",
            choices=("text", "json") if name == "check" else ("yaml", "json"),
            default="text" if name == "check" else "yaml",
        )
        if name == "check":
            c.add_argument(
                "--strict",
                action="store_true",
                help="exit 1 also for kinds the policy does not police that request GPUs",
            )
            c.add_argument(
                "--cluster",
                action="store_true",
                help="judge against the live cluster's nodes (pre-flight rules: would it fit?)",
            )
            _cluster_flags(c)
        c.set_defaults(func=func)

    a = sub.add_parser("audit", help="judge what already runs in the cluster, per namespace and rule")
    a.add_argument("--config", help="YAML config file (default: built-in defaults)")
    a.add_argument("--values", help="a Helm values file of the gpu-policy chart: judge as that chart would")
    a.add_argument("--release-namespace", default="gpu-policy", help="with --values: the chart's namespace")
    a.add_argument("--cluster-version", help="cluster version for version-gated rules (e.g. 1.27)")
    a.add_argument("-n", "--namespace", help="only this namespace (default: all)")
    a.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a.add_argument("--page-size", type=int, default=500, help="objects per list request")
    a.add_argument("--limit", type=int, default=200, help="text output: violations listed one by one at most")
    a.add_argument(
        "--strict", action="store_true", help="exit 1 also when an object would be denied if every warn rule were deny"
    )
    a.add_argument(
        "--report", action="store_true", help="write wgpolicyk8s.io/v1alpha2 PolicyReports (one per namespace)"
    )
    a.add_argument("--report-file", help="write the PolicyReports as YAML to this file (- for stdout) instead")
    _cluster_flags(a)
    a.set_defaults(func=cluster.audit)

    from ..verify import DEFAULT_IMAGE

    v = sub.add_parser("verify", help="prove GPU scheduling and isolation on a live cluster (probe pods)")
    v.add_argument("--config", help="YAML config file: the GPU model and the webhook's policy (default: built-in)")
    v.add_argument("--values", help="a Helm values file of the gpu-policy chart")
    v.add_argument("--release-namespace", default="gpu-policy", help="with --values: the chart's namespace")
    v.add_argument("--cluster-version", help=argparse.SUPPRESS)
    v.add_argument("-n", "--namespace", default="default", help="where the probes run (default: default)")
    v.add_argument("--image", default=DEFAULT_IMAGE, help="probe image; it should bake NVIDIA_VISIBLE_DEVICES=all")
    v.add_argument("--node", help="run the probes on this node (default: the first that has room)")
    v.add_argument("--resource", help="GPU resource to request (default: gpuResourceName, else what nodes offer)")
    v.add_argument(
        "--isolation-probes",
        type=int,
        default=2,
        help="probes that hold a device each at the same time per isolation check, at most the node's free "
        "devices (default: %(default)s)",
    )
    v.add_argument(
        "--device-plugin-selector", action="append", help="label selector of device-plugin pods (repeatable)"
    )
    v.add_argument("-o", "--output", choices=("text", "json", "junit"), default="text")
    v.add_argument("--timeout", type=float, default=300.0, help="seconds for the whole run")
    v.add_argument("--keep", action="store_true", help="leave the probes for inspection")
    _cluster_flags(v)
    v.set_defaults(func=cluster.verify)

    cert = sub.add_parser("certs", help="write a CA and a serving certificate for the webhook Service")
    cert.add_argument("--out", required=True, help="folder for ca.crt, ca.key, tls.crt, tls.key")
    cert.add_argument("--service", default="gpu-policy")
    cert.add_argument("--namespace", default="gpu-policy")
    cert.add_argument("--days", type=int, default=365)
    cert.add_argument("--host", action="append", default=[], help="extra DNS name or IP SAN (repeatable)")
    cert.add_argument("--force", action="store_true", help="replace existing files")
    cert.set_defaults(func=certs.command)
    return p


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.setup(str(args.log_level), args.log_format)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"gpu-policy: invalid configuration:\n{exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
