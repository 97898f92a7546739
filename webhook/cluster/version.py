"""What the webhook asks the cluster: /version, at start-up and every server.clusterVersionSeconds
(never per request; the periodic read runs in a thread, off the event loop)."""

from __future__ import annotations

import logging

from ..config import parse_version
from .client import call_json, connect

log = logging.getLogger("gpu-policy.cluster")


def detect_version(timeout: float = 5.0, quiet: bool = False) -> tuple[int, int] | None:
    """(major, minor) from the API server's /version gitVersion, or None when it cannot be read.

    None means "unknown", which skips version-gated mutations rather than guessing.
    """
    try:
        from kubernetes import client  # imported lazily: heavy, and only needed here

        api_client, _where = connect()  # the same config resolution as the cluster view's
        # Raw JSON, not the client's VersionInfo model: we need one field, and the model
        # rejects answers that omit any of the others (seen with minimal /version stand-ins).
        git_version = str(call_json(client.VersionApi(api_client).get_code, timeout=timeout)["gitVersion"])
    except Exception as exc:  # no cluster, no kubeconfig, RBAC, network: all mean "unknown"
        if quiet:
            log.debug("cannot read /version (%s)", exc)
            return None
        log.warning("clusterVersion=auto: cannot read /version (%s); version-gated mutations are skipped", exc)
        return None
    version = parse_version(git_version)
    if version is None:
        log.warning("clusterVersion=auto: cannot parse gitVersion %r; version-gated mutations are skipped", git_version)
    elif not quiet:
        log.info("cluster version %d.%d (gitVersion %s)", version[0], version[1], git_version)
    return version
