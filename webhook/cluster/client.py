"""The kubernetes client, as the cluster commands and the server use it: connecting (in-cluster or
a kubeconfig and context), and calls whose JSON is read as bytes (orjson where the `fast` extra is
installed, the standard library's json otherwise), not through the client's generated models.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from ..admission.review import loads

log = logging.getLogger("gpu-policy.clusterview")


class ClusterError(Exception):
    """The cluster cannot be read: none configured, unreachable, unauthorised (the CLI's exit 2)."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> tuple[Any, str]:
    """An ApiClient from in-cluster config, else the kubeconfig, and which it was; ClusterError
    (saying why) when neither exists. An explicit `kubeconfig` or `context` (the CLI's flags)
    skips the in-cluster config.

    Whether either can exist is decided before the client is imported: it costs about 40 MB of
    memory, which `make run` (no cluster) should not pay for nothing."""
    if not (kubeconfig or context or os.environ.get("KUBERNETES_SERVICE_HOST")):
        paths = (os.environ.get("KUBECONFIG") or "~/.kube/config").split(os.pathsep)
        if not any(os.path.isfile(os.path.expanduser(p)) for p in paths if p):
            raise ClusterError(f"no cluster: not in a pod, and no kubeconfig ({os.pathsep.join(paths)})")
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig or context:
            raise config.ConfigException("a kubeconfig was asked for")
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call,unused-ignore]
        where = "in-cluster"
    except config.ConfigException:
        try:
            # KUBECONFIG read now (the client reads it once, at import), a path list as kubectl allows
            path = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            config.load_kube_config(  # type: ignore[no-untyped-call,unused-ignore]
                config_file=path, context=context, client_configuration=configuration
            )
            where = "kubeconfig"
        except Exception as exc:  # no file, no context: no cluster (make run)
            raise ClusterError(
                f"no cluster: no in-cluster config and no usable kubeconfig ({short_error(exc)})"
            ) from None
    return client.ApiClient(configuration), where


def load_client(kubeconfig: str | None = None, context: str | None = None) -> tuple[Any, str] | None:
    """`connect` for the server's cluster view: None (said once in the log) when there is no cluster."""
    try:
        return connect(kubeconfig, context)
    except ClusterError as exc:
        log.info("cluster view off: %s", exc)
        return None


def read_json(response: Any) -> Any:
    """The body of a response opened with _preload_content=False, parsed; the connection goes back
    to the pool only with its body read."""
    try:
        return loads(response.data) if response.data else {}
    finally:
        response.release_conn()


def call_json(call: Callable[..., Any], *args: Any, timeout: Any = 30.0, **kwargs: Any) -> Any:
    """A client call answered as parsed JSON. A cluster that is not there (refused, TLS, DNS) is
    ClusterError; the API server's own answers (ApiException: 403, 404, 409, 410) pass through."""
    from kubernetes.client.exceptions import ApiException

    try:
        response = call(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
    except ApiException:
        raise
    except Exception as exc:
        raise ClusterError(f"cannot reach the API server: {type(exc).__name__}: {exc}") from None
    return read_json(response)


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
