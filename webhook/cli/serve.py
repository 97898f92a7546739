"""`gpu-policy serve`: parse, check the certificates, say what will run, and hand over to the
server's runtime (webhook.serve.process for one process, webhook.serve.workers for N)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ..config import read_file
from ..offline.reports import EXIT_INPUT, EXIT_OK

log = logging.getLogger("gpu-policy")


def command(args: argparse.Namespace) -> int:
    if args.workers < 1:
        print("gpu-policy: --workers must be at least 1", file=sys.stderr)
        return EXIT_INPUT
    # The file is read once: its bytes are both the settings and the digest a reload compares.
    data = read_file(args.config) if args.config else None
    from ..serve.reload import activate

    active = activate(data, args.config or "config", version=args.cluster_version)
    if active.follows_version:
        from ..cluster.version import detect_version

        active = active.with_policy(cluster_version=detect_version())
    try:
        from ..serve.tls import new_context

        new_context(os.path.join(args.cert_dir, "tls.crt"), os.path.join(args.cert_dir, "tls.key"))
    except (OSError, ValueError) as exc:
        print(f"gpu-policy: cannot load {args.cert_dir}/tls.crt and tls.key: {exc}", file=sys.stderr)
        return EXIT_INPUT
    digest = active.digest
    log.info(
        "effective config (sha256 %s)",
        digest[:12] or "built-in defaults",
        extra={"config": active.effective, "configSha256": digest, "configFile": args.config or ""},
    )
    version = active.policy.cluster_version
    from .. import core_build

    log.info(
        "starting https://%s:%d with %d worker(s); cluster version %s; policy core %s",
        args.host,
        args.port,
        args.workers,
        f"{version[0]}.{version[1]}" if version else "unknown",
        core_build(),
    )
    from ..serve.process import Listen, run

    listen = Listen(
        host=args.host,
        port=args.port,
        cert_dir=args.cert_dir,
        client_ca=args.client_ca,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        config_path=args.config,
        cluster_version=args.cluster_version,
    )
    if args.workers > 1:
        from ..serve.workers import prefork

        return prefork(active, listen, args.workers)
    try:
        run(active, listen)
    except OSError as exc:  # the port is taken, or the host cannot be bound
        print(f"gpu-policy: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK
