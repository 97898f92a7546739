"""`gpu-policy certs`: a CA and a serving certificate for the webhook Service."""

from __future__ import annotations

import argparse
import sys

from .. import certs
from ..offline.reports import EXIT_INPUT, EXIT_OK


def command(args: argparse.Namespace) -> int:
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
