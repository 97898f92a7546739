"""`gpu-policy`: serve the webhook, check or mutate manifests offline, make certificates.

`check` and `mutate` build the same AdmissionReview request the API server would send
and run it through `webhook.admission`, so their messages are the server's to the letter.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import os
import signal
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import yaml

from . import admission, certs, review
from .config import ConfigError, Settings, load, parse_version
from .manifests import Document, InputError, read
from .policy import group_of

if TYPE_CHECKING:
    from .tls import CertReloader
from .policy.types import DENY_PREFIX

EXIT_OK, EXIT_DENIED, EXIT_INPUT = 0, 1, 2
log = logging.getLogger("gpu-policy")


def _settings(args: argparse.Namespace) -> Settings:
    settings = load(args.config)
    if getattr(args, "cluster_version", None):
        if args.cluster_version == "unknown":
            return settings.with_cluster_version(None)
        version = parse_version(args.cluster_version)
        if version is None:
            raise ConfigError([f"--cluster-version: {args.cluster_version!r} is not a version such as 1.27"], "args")
        return settings.with_cluster_version(version)
    return settings


# ---------------------------------------------------------------- serve


def _serve_one(settings: Settings, args: argparse.Namespace, reuse_port: bool) -> None:
    from .tls import CertReloader

    reloader = CertReloader(args.cert_dir, settings.cert_reload_seconds)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_serve(settings, reloader, args.host, args.port, reuse_port))


async def _serve(settings: Settings, reloader: CertReloader, host: str, port: int, reuse_port: bool) -> None:
    """Serve until SIGTERM or SIGINT; on SIGTERM drain first (see Settings.drain_seconds)."""
    from aiohttp import web

    from .server import create_app, set_ready

    app = create_app(settings, reloader)
    # access_log=None: the API server calls for every pod, so no per-request log lines.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=15.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=reloader.context, reuse_port=reuse_port or None)
    await site.start()
    loop = asyncio.get_running_loop()
    received: asyncio.Future[int] = loop.create_future()

    def on_signal(signum: int) -> None:
        if not received.done():
            received.set_result(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        if await received == signal.SIGTERM and settings.drain_seconds > 0:
            # Kubernetes removes a terminating pod from the Service while it is told to stop;
            # answering a little longer turns that race into zero failed admissions.
            set_ready(app, False)
            log.info("SIGTERM: not ready, draining for %.1f s", settings.drain_seconds)
            await asyncio.sleep(settings.drain_seconds)
    finally:
        await runner.cleanup()  # closes the listener, then waits for reviews in flight


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings.cluster_version_auto:
        from .cluster import detect_version

        settings = settings.with_cluster_version(detect_version())
    try:
        from .tls import new_context

        new_context(os.path.join(args.cert_dir, "tls.crt"), os.path.join(args.cert_dir, "tls.key"))
    except (OSError, ValueError) as exc:
        print(f"gpu-policy: cannot load {args.cert_dir}/tls.crt and tls.key: {exc}", file=sys.stderr)
        return EXIT_INPUT
    version = settings.policy.cluster_version
    log.info(
        "serving https://%s:%d with %d worker(s); cluster version %s",
        args.host,
        args.port,
        args.workers,
        f"{version[0]}.{version[1]}" if version else "unknown",
    )
    if args.workers < 1:
        print("gpu-policy: --workers must be at least 1", file=sys.stderr)
        return EXIT_INPUT
    if args.workers == 1:
        try:
            _serve_one(settings, args, reuse_port=False)
        except OSError as exc:  # the port is taken, or the host cannot be bound
            print(f"gpu-policy: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_INPUT
        return EXIT_OK
    return _prefork(settings, args)


def _prefork(settings: Settings, args: argparse.Namespace) -> int:
    """N processes sharing the port through SO_REUSEPORT; the kernel spreads connections."""
    children: list[int] = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _serve_one(settings, args, reuse_port=True)
            except BaseException:
                log.exception("worker failed")
                code = 1
            finally:
                os._exit(code)
        children.append(pid)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = EXIT_OK
    remaining = set(children)
    while remaining:
        pid, code = os.wait()
        remaining.discard(pid)
        if code != 0 and remaining:
            # One worker died: stop all, so the kubelet restarts a whole, healthy pod.
            log.error("worker %d exited with status %d; stopping the others", pid, code)
            forward(signal.SIGTERM, None)
            status = 1
    return status


# ---------------------------------------------------------------- check / mutate


def _request(doc: Document, namespace: str | None) -> review.Request:
    obj = doc.obj
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    ns = namespace or (meta.get("namespace") if isinstance(meta.get("namespace"), str) else "") or "default"
    kind = obj.get("kind")
    return review.Request(
        api_version=review.V1,
        uid=str(uuid.uuid4()),
        group=group_of(obj.get("apiVersion")),
        kind=kind if isinstance(kind, str) else "",
        operation="CREATE",
        sub_resource="",
        namespace=ns,
        name=str(meta.get("name") or meta.get("generateName") or ""),
        object=obj,
        old_object=None,
        dry_run=True,
    )


def _label(doc: Document, req: review.Request) -> str:
    return f"{doc.where}: {req.kind or '<no kind>'} {req.namespace}/{req.name or '<no name>'}"


def cmd_check(args: argparse.Namespace) -> int:
    settings = _settings(args)
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    denied = 0
    for doc in read(args.file):
        if isinstance(doc, InputError):
            errors.append(str(doc))
            results.append({"where": doc.where, "error": doc.message})
            continue
        req = _request(doc, args.namespace)
        if not req.kind:
            errors.append(f"{doc.where}: kind: is required")
            results.append({"where": doc.where, "error": "kind: is required"})
            continue
        outcome = admission.validate(req, settings.policy)
        response = outcome.response["response"]
        entry: dict[str, Any] = {
            "where": doc.where,
            "kind": req.kind,
            "namespace": req.namespace,
            "name": req.name,
            "decision": outcome.decision,
            "allowed": response["allowed"],
            "message": response.get("status", {}).get("message"),
            "warnings": response.get("warnings", []),
            "auditAnnotations": response.get("auditAnnotations", {}),
            "violations": [v.as_dict() for v in outcome.verdict.deny] if outcome.verdict else [],
        }
        results.append(entry)
        if outcome.decision == "malformed":
            errors.append(f"{doc.where}: {entry['message']}")
        elif not response["allowed"]:
            denied += 1
    code = EXIT_INPUT if errors else EXIT_DENIED if denied else EXIT_OK
    if args.output == "json":
        json.dump({"results": results, "exitCode": code}, sys.stdout, indent=2)
        print()
    else:
        _print_text(results)
    return code


def _print_text(results: Sequence[Mapping[str, Any]]) -> None:
    counts = {"denied": 0, "warned": 0, "clean": 0, "skipped": 0, "errors": 0}
    for r in results:
        if "error" in r:
            counts["errors"] += 1
            print(f"ERROR {r['where']}: {r['error']}")
            continue
        label = f"{r['where']}: {r['kind']} {r['namespace']}/{r['name'] or '<no name>'}"
        if r["decision"] == "malformed":
            counts["errors"] += 1
            print(f"ERROR {label}: {r['message']}")
        elif not r["allowed"]:
            counts["denied"] += 1
            # The server's message, one violation a line: `violates GPU policy: a (...), b (...)`.
            print(f"DENY  {label}: {DENY_PREFIX.strip()}")
            for v in r["violations"]:
                print(f"      - {v['text']}")
        elif r["decision"] == "skipped":
            counts["skipped"] += 1
        elif r["warnings"] or r["auditAnnotations"]:
            counts["warned"] += 1
        else:
            counts["clean"] += 1
        for w in r.get("warnings", []):
            print(f"WARN  {label}: {w}")
        for key, value in r.get("auditAnnotations", {}).items():
            print(f"AUDIT {label}: {key}: {value}")
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    print(f"{len(results)} object(s): {summary or 'none'}")


def cmd_mutate(args: argparse.Namespace) -> int:
    import jsonpatch

    settings = _settings(args)
    out: list[Any] = []
    code = EXIT_OK
    for doc in read(args.file):
        if isinstance(doc, InputError):
            print(f"ERROR {doc}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        req = _request(doc, args.namespace)
        outcome = admission.mutate(req, settings.policy)
        response = outcome.response["response"]
        if outcome.decision == "malformed":
            print(f"ERROR {doc.where}: {response['status']['message']}", file=sys.stderr)
            code = EXIT_INPUT
            continue
        for w in response.get("warnings", []):
            print(f"WARN  {_label(doc, req)}: {w}", file=sys.stderr)
        obj = doc.obj
        if "patch" in response:
            ops = review.loads(base64.b64decode(response["patch"]))
            obj = jsonpatch.apply_patch(obj, ops)
        out.append(obj)
    if args.output == "json":
        json.dump(out if len(out) != 1 else out[0], sys.stdout, indent=2)
        print()
    else:
        yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
    return code


# ---------------------------------------------------------------- certs


def cmd_certs(args: argparse.Namespace) -> int:
    if args.days < 1:
        print("gpu-policy certs: --days must be at least 1", file=sys.stderr)
        return EXIT_INPUT
    bundle = certs.generate(args.service, args.namespace, days=args.days, extra_hosts=tuple(args.host))
    try:
        paths = certs.write(bundle, args.out, force=args.force)
    except certs.CertsExistError as exc:
        print(f"gpu-policy certs: {exc}", file=sys.stderr)
        return EXIT_INPUT
    names = certs.service_names(args.service, args.namespace) + list(args.host)
    print(f"wrote {', '.join(str(p) for p in paths)} for {', '.join(names)} (valid {args.days} days)")
    return EXIT_OK


# ---------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-policy", description="GPU admission policy for Kubernetes")
    p.add_argument("--log-level", default=os.environ.get("GPU_POLICY_LOG_LEVEL", "info"))
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTPS admission webhook")
    serve.add_argument("--config", help="YAML config file (default: built-in defaults)")
    serve.add_argument("--cert-dir", required=True, help="folder with tls.crt and tls.key")
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=8443)
    serve.add_argument("--workers", type=int, default=1, help="processes sharing the port (SO_REUSEPORT)")
    serve.add_argument("--cluster-version", help="override clusterVersion (e.g. 1.27, unknown)")
    serve.set_defaults(func=cmd_serve)

    for name, func, text in (
        ("check", cmd_check, "judge manifests offline, as the validating webhook would"),
        ("mutate", cmd_mutate, "print manifests as the mutating webhook would change them"),
    ):
        c = sub.add_parser(name, help=text)
        c.add_argument("-f", "--file", action="append", required=True, help="file, folder or - (repeatable)")
        c.add_argument("--config", help="YAML config file (default: built-in defaults)")
        c.add_argument("--cluster-version", help="cluster version for version-gated mutations (e.g. 1.27)")
        c.add_argument("-n", "--namespace", help="namespace to assume (default: metadata.namespace or default)")
        c.add_argument(
            "-o",
            "--output",
            choices=("text", "json") if name == "check" else ("yaml", "json"),
            default="text" if name == "check" else "yaml",
        )
        c.set_defaults(func=func)

    cert = sub.add_parser("certs", help="write a CA and a serving certificate for the webhook Service")
    cert.add_argument("--out", required=True, help="folder for ca.crt, ca.key, tls.crt, tls.key")
    cert.add_argument("--service", default="gpu-policy")
    cert.add_argument("--namespace", default="gpu-policy")
    cert.add_argument("--days", type=int, default=365)
    cert.add_argument("--host", action="append", default=[], help="extra DNS name or IP SAN (repeatable)")
    cert.add_argument("--force", action="store_true", help="replace existing files")
    cert.set_defaults(func=cmd_certs)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=str(args.log_level).upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"gpu-policy: invalid configuration:\n{exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
