"""`gpu-policy`: argument parsing and dispatch. Each command lives in its own module:
serve (runner, drain, workers), offline (check and mutate), cluster (audit, check --cluster), certs."""

from __future__ import annotations

import argparse
import os
import sys

from .. import core_build, package_version
from ..config import ConfigError
from ..offline.reports import EXIT_INPUT
from ..serve import logs
from . import certs, cluster, offline, probe, serve


class _Help(argparse.RawDescriptionHelpFormatter):
    """Examples and exit codes as written (the epilogs); every option's default shown, as
    kubectl's help does, unless it has none worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "%(default)" in text or default in (None, False, [], argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: {default})"


def _epilog(examples: str, exits: str) -> str:
    return f"examples:\n{examples}\n\nexit codes:\n{exits}"


SERVE = _epilog(
    "  gpu-policy serve --cert-dir certs/dev --host 127.0.0.1          # what `make run` starts\n"
    "  gpu-policy --log-format json serve --config /etc/gpu-policy/config/config.yaml \\\n"
    "      --cert-dir /etc/gpu-policy/tls --workers 2                  # what the chart runs",
    "  0  stopped by SIGTERM or SIGINT (after draining)\n  2  the config, the certificates or the port cannot be used",
)
CHECK = _epilog(
    "  gpu-policy check -f deploy/                                      # every .yaml/.yml/.json below it\n"
    "  gpu-policy check ./chart --chart-values prod.yaml -n ml          # a chart, rendered by helm, per template\n"
    "  helm template my-app ./chart | gpu-policy check -f -             # what a chart renders, from a pipe\n"
    "  gpu-policy check -f job.yaml --values gpu-policy-values.yaml     # as that installed chart judges\n"
    "  gpu-policy check -o sarif -f k8s/ > gpu-policy.sarif              # for code scanning\n"
    "  gpu-policy check --cluster -f job.yaml                           # also: would it fit the cluster's nodes?",
    "  0  every object would be admitted (warnings allowed)\n"
    "  1  an object would be denied (--strict: or it is a kind the policy does not police that requests GPUs;\n"
    "     --fail-on-empty: or there was no object at all)\n"
    "  2  unusable input (not YAML or JSON, no kind, a misshapen field) or configuration",
)
MUTATE = _epilog(
    "  gpu-policy mutate -f pod.yaml --cluster-version 1.27             # the patched pod, as YAML\n"
    "  helm template ./chart | gpu-policy mutate -f - -o json",
    "  0  every object printed (a note on stderr for one that would still be denied)\n"
    "  2  unusable input or configuration",
)
AUDIT = _epilog(
    "  gpu-policy audit                                                 # every namespace, text\n"
    "  gpu-policy audit -n ml -o json\n"
    "  gpu-policy audit --report                                        # PolicyReports per namespace",
    "  0  nothing running would be denied\n"
    "  1  something running would be denied (--strict: also if every warn rule were deny)\n"
    "  2  no cluster, or no rights to read it",
)
VERIFY = _epilog(
    "  gpu-policy verify -n gpu-tests\n"
    "  gpu-policy verify --node gpu-node-3 --isolation-probes 4 -o junit > verify.xml",
    "  0  every check passed (skips and infos included)\n"
    "  1  a check failed\n"
    "  2  could not run: no cluster, no GPU nodes, no rights",
)
PROBE = _epilog(
    "  gpu-policy probe --url https://gpu-policy.gpu-policy.svc:443 --ca /ca/ca.crt   # what helm test runs\n"
    "  gpu-policy probe --url https://127.0.0.1:8443 --ca certs/dev/ca.crt --expect warned",
    "  0  ready, and the privileged GPU pod answered as expected\n"
    "  1  not ready, unreachable, or another answer\n"
    "  2  the CA cannot be read",
)
CERTS = _epilog(
    "  gpu-policy certs --out certs/dev --host localhost --host 127.0.0.1 --days 30",
    "  0  written\n  2  the files exist (--force replaces them), or a bad value",
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-policy",
        description="GPU admission policy for Kubernetes: the webhook, and its policy offline and against a cluster.",
        formatter_class=_Help,
        epilog="run `gpu-policy COMMAND --help` for a command's options, examples and exit codes",
    )
    p.add_argument(
        "--log-level",
        default=os.environ.get("GPU_POLICY_LOG_LEVEL", "info"),
        help="debug, info, warning or error ($GPU_POLICY_LOG_LEVEL)",
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("GPU_POLICY_LOG_FORMAT", "text"),
        help="text for people; json (one object per line) for log pipelines, the chart's ($GPU_POLICY_LOG_FORMAT)",
    )
    p.add_argument(
        "--version", action="version", version=f"gpu-policy {package_version()} (policy core: {core_build()})"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, text: str, epilog: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, epilog=epilog, formatter_class=_Help)

    s = command("serve", "run the HTTPS admission webhook", SERVE)
    s.add_argument("--config", help="YAML config file (default: built-in defaults)")
    s.add_argument("--cert-dir", required=True, help="folder with tls.crt and tls.key (reloaded when they change)")
    s.add_argument(
        "--client-ca",
        help="PEM file of the CA that signs the API server's client certificate (its AdmissionConfiguration "
        "kubeConfigFile): the HTTPS port then serves no other client (reloaded with the pair)",
    )
    s.add_argument("--host", default="0.0.0.0", help="address of the HTTPS port")
    s.add_argument("--port", type=int, default=8443, help="the HTTPS port: reviews and probes")
    s.add_argument("--workers", type=int, default=1, help="processes sharing the port (SO_REUSEPORT)")
    s.add_argument(
        "--metrics-port",
        type=int,
        default=9090,
        help="plain-HTTP /metrics (all workers summed) and probes; 0: no /metrics at all",
    )
    s.add_argument(
        "--metrics-host",
        help="address of the metrics port, e.g. 127.0.0.1 behind a scraping sidecar (default: --host)",
    )
    s.add_argument("--cluster-version", help="override clusterVersion (e.g. 1.27, unknown)")
    s.set_defaults(func=serve.command)

    for name, func, text, epilog in (
        ("check", offline.check, "judge manifests offline, as the validating webhook would", CHECK),
        ("mutate", offline.mutate, "print manifests as the mutating webhook would change them", MUTATE),
    ):
        c = command(name, text, epilog)
        c.add_argument("files", nargs="*", metavar="FILE", help="files or folders, as -f (how pre-commit passes them)")
        c.add_argument("-f", "--file", action="append", default=[], help="file, folder or - for stdin (repeatable)")
        c.add_argument("--config", help="YAML config file (default: built-in defaults)")
        c.add_argument(
            "--chart-values",
            action="append",
            default=[],
            metavar="FILE",
            help="a values file for the Helm charts among the inputs (repeatable): a chart's folder, or a file "
            "it is made of, is rendered by helm (on PATH, or $HELM) and what it renders is judged, each result "
            "naming its template",
        )
        c.add_argument(
            "--chart-namespace",
            metavar="NS",
            help="the release namespace those charts are rendered in (default: -n, else default)",
        )
        c.add_argument(
            "--values",
            help="a Helm values file of the gpu-policy chart: judge exactly as that installed chart would",
        )
        c.add_argument(
            "--release-namespace", default="gpu-policy", help="with --values: the chart's namespace (always exempt)"
        )
        c.add_argument("--cluster-version", help="cluster version for version-gated mutations (e.g. 1.27)")
        c.add_argument(
            "--engine",
            choices=["webhook", "cel"],
            default="webhook",
            help="cel: as the API server does it in enforcement native (needs cel-python): the policies' CEL "
            "twins (isolation's MutatingAdmissionPolicy"
            + (", the rules' ValidatingAdmissionPolicies" if name == "check" else "")
            + "), the webhook for the rest",
        )
        c.add_argument(
            "-n",
            "--namespace",
            help="namespace for objects without one (default: default); a different explicit one is an error",
        )
        c.add_argument(
            "-o",
            "--output",
            choices=("text", "json", "junit", "sarif") if name == "check" else ("yaml", "json"),
            default="text" if name == "check" else "yaml",
            help="text for people, json for scripts, junit for CI test reports, sarif for code scanning"
            if name == "check"
            else "the patched objects as YAML documents or JSON",
        )
        if name == "check":
            c.add_argument("-v", "--verbose", action="store_true", help="text: list clean objects too")
            c.add_argument(
                "--manifests-only",
                action="store_true",
                help="skip what is not a Kubernetes object (values files, Chart.yaml, Helm templates): "
                "for a pre-commit hook, which passes every YAML file",
            )
            c.add_argument(
                "--fail-on-empty",
                action="store_true",
                help="exit 1 when the input holds no object (a CI step that rendered nothing)",
            )
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

    a = command("audit", "judge what already runs in the cluster, per namespace and rule", AUDIT)
    a.add_argument("--config", help="YAML config file (default: built-in defaults)")
    a.add_argument("--values", help="a Helm values file of the gpu-policy chart: judge as that chart would")
    a.add_argument("--release-namespace", default="gpu-policy", help="with --values: the chart's namespace")
    a.add_argument("--cluster-version", help="cluster version for version-gated rules (default: the cluster's)")
    a.add_argument("-n", "--namespace", help="only this namespace (default: all)")
    a.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text for people, json for scripts")
    a.add_argument("--page-size", type=int, default=500, help="objects per list request")
    a.add_argument("--limit", type=int, default=200, help="text output: violations listed one by one at most")
    a.add_argument(
        "--strict", action="store_true", help="exit 1 also when an object would be denied if every warn rule were deny"
    )
    a.add_argument(
        "--report", action="store_true", help="write wgpolicyk8s.io/v1alpha2 PolicyReports (one per namespace)"
    )
    a.add_argument("--report-file", help="write the PolicyReports as YAML to this file (- for stdout) instead")
    a.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 whatever it finds (the chart's periodic audit: the findings are in the reports)",
    )
    _cluster_flags(a)
    a.set_defaults(func=cluster.audit)

    from ..cluster.probes import DEFAULT_IMAGE

    v = command("verify", "prove GPU scheduling and isolation on a live cluster (probe pods)", VERIFY)
    v.add_argument("--config", help="YAML config file: the GPU model and the webhook's policy (default: built-in)")
    v.add_argument("--values", help="a Helm values file of the gpu-policy chart")
    v.add_argument("--release-namespace", default="gpu-policy", help="with --values: the chart's namespace")
    v.add_argument("--cluster-version", help=argparse.SUPPRESS)
    v.add_argument("-n", "--namespace", default="default", help="where the probes run")
    v.add_argument("--image", default=DEFAULT_IMAGE, help="probe image; it should bake NVIDIA_VISIBLE_DEVICES=all")
    v.add_argument("--node", help="run the probes on this node (default: the first that has room)")
    v.add_argument("--resource", help="GPU resource to request (default: gpuResourceName, else what nodes offer)")
    v.add_argument(
        "--isolation-probes",
        type=int,
        default=2,
        help="probes that hold a device each at the same time per isolation check, at most the node's free devices",
    )
    v.add_argument(
        "--device-plugin-selector", action="append", help="label selector of device-plugin pods (repeatable)"
    )
    v.add_argument(
        "-o", "--output", choices=("text", "json", "junit"), default="text", help="text, json, or junit for CI"
    )
    v.add_argument("--timeout", type=float, default=300.0, help="seconds for the whole run")
    v.add_argument("--keep", action="store_true", help="leave the probes for inspection")
    _cluster_flags(v)
    v.set_defaults(func=cluster.verify)

    pr = command("probe", "check a running webhook over verified TLS: /readyz, and a privileged GPU pod", PROBE)
    pr.add_argument("--url", required=True, help="the webhook's base URL, e.g. https://gpu-policy.gpu-policy.svc:443")
    pr.add_argument("--ca", required=True, help="the CA that signed its serving certificate (PEM file)")
    pr.add_argument(
        "--expect",
        choices=("denied", "warned"),
        default="denied",
        help="what the policy must answer: denied, or warned (rollout audit)",
    )
    pr.add_argument("-n", "--namespace", default="gpu-policy-probe", help="the namespace the pod claims")
    pr.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    pr.set_defaults(func=probe.command)

    cert = command("certs", "write a CA and a serving certificate for the webhook Service", CERTS)
    cert.add_argument("--out", required=True, help="folder for ca.crt, ca.key, tls.crt, tls.key")
    cert.add_argument("--service", default="gpu-policy", help="the webhook's Service name (in the DNS names)")
    cert.add_argument("--namespace", default="gpu-policy", help="the Service's namespace (in the DNS names)")
    cert.add_argument("--days", type=int, default=365, help="validity of the serving certificate")
    cert.add_argument("--host", action="append", default=[], help="extra DNS name or IP SAN (repeatable)")
    cert.add_argument("--force", action="store_true", help="replace existing files")
    cert.set_defaults(func=certs.command)
    return p


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.command is None:  # as kubectl: a bare command is a request for help
        cli.print_help()
        return 0
    logs.setup(str(args.log_level), args.log_format)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"gpu-policy: invalid configuration:\n{exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpu-policy check ... | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
