"""Playing kube-apiserver against the real webhook process, as faithfully as we can.

What the API server does, and so what this client does:
- dials the Service over TLS, verifying the certificate against the configuration's
  caBundle for the name `<service>.<namespace>.svc` (we connect to 127.0.0.1 but send
  and verify that name, exactly as SNI and hostname checks would see it);
- POSTs `admission.k8s.io/v1` AdmissionReviews to `<path>?timeout=<N>s` with
  Content-Type application/json and a client timeout of the webhook's timeoutSeconds;
- rejects a response whose uid does not match, or a patch whose patchType is not JSONPatch;
- applies the JSONPatch to the object it sent.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import socket
import ssl
import uuid
from dataclasses import dataclass
from typing import Any

import jsonpatch

RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "PodTemplate": ("", "v1", "podtemplates"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "Deployment": ("apps", "v1", "deployments"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "LimitRange": ("", "v1", "limitranges"),
    "Service": ("", "v1", "services"),
}


class ServiceConnection(http.client.HTTPSConnection):
    """Connects to `address` but speaks TLS and HTTP as `host` (the Service DNS name)."""

    def __init__(self, address: str, port: int, host: str, context: ssl.SSLContext, timeout: float) -> None:
        super().__init__(host, port, context=context, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        # Go's net package (the API server's webhook client) sets TCP_NODELAY on every connection;
        # without it, Nagle and the peer's delayed ACK add 40 ms to each request here.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


@dataclass
class Raw:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class ApiServer:
    def __init__(
        self,
        port: int,
        ca_file: str,
        *,
        service: str = "gpu-policy",
        namespace: str = "gpu-policy",
        address: str = "127.0.0.1",
        timeout_seconds: int = 10,
    ) -> None:
        self.context = ssl.create_default_context(cafile=ca_file)  # CERT_REQUIRED + hostname check
        self.host = f"{service}.{namespace}.svc"
        self.port = port
        self.address = address
        self.timeout = timeout_seconds
        self._conn: ServiceConnection | None = None
        self.last_uid = ""

    def _connection(self) -> ServiceConnection:
        if self._conn is None:
            self._conn = ServiceConnection(self.address, self.port, self.host, self.context, self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def post(self, path: str, body: bytes, content_type: str = "application/json") -> Raw:
        conn = self._connection()  # keep-alive, as the API server's transport does
        conn.request(
            "POST",
            f"{path}?timeout={self.timeout}s",
            body=body,
            headers={
                "Content-Type": content_type,
                "Accept": "application/json, */*",
            },
        )
        resp = conn.getresponse()
        data = resp.read()
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        return Raw(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)

    def get(self, path: str) -> Raw:
        conn = self._connection()
        conn.request("GET", path)
        resp = conn.getresponse()
        return Raw(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())

    @staticmethod
    def build(
        obj: dict[str, Any] | None,
        *,
        operation: str = "CREATE",
        old: dict[str, Any] | None = None,
        kind: str | None = None,
        namespace: str | None = None,
        sub_resource: str | None = None,
        dry_run: bool = False,
        api_version: str = "admission.k8s.io/v1",
        user: str = "kubernetes-admin",
    ) -> dict[str, Any]:
        source = obj if obj is not None else old or {}
        kind = kind or source.get("kind", "Pod")
        default_group, default_version, resource = RESOURCES.get(kind, ("", "v1", kind.lower() + "s"))
        group, _, version = str(source.get("apiVersion", "")).rpartition("/")
        if not version:
            group, version = default_group, default_version
        meta = source.get("metadata", {})
        request: dict[str, Any] = {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": meta.get("name", ""),
            "namespace": namespace if namespace is not None else meta.get("namespace", "default"),
            "operation": operation,
            "userInfo": {"username": user, "groups": ["system:masters", "system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
        }
        if sub_resource:
            request["subResource"] = sub_resource
        return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}

    def review(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        """POST a review and return its `response`, checked the way the API server checks it."""
        self.last_uid = review["request"]["uid"]
        raw = self.post(path, json.dumps(review).encode())
        assert raw.status == 200, (raw.status, raw.body)
        assert raw.headers["content-type"].startswith("application/json")
        body = raw.json()
        assert body["apiVersion"] == review["apiVersion"]
        assert body["kind"] == "AdmissionReview"
        response = body["response"]
        assert response["uid"] == review["request"]["uid"], "the API server rejects a response with another uid"
        assert isinstance(response["allowed"], bool)
        if "patch" in response:
            assert response.get("patchType") == "JSONPatch"
        return response

    def validate(self, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self.review("/validate", self.build(obj, **kw))

    def mutate(self, obj: dict[str, Any], **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """(response, object after the patch) as the API server would store it."""
        response = self.review("/mutate", self.build(obj, **kw))
        if "patch" not in response:
            return response, obj
        ops = json.loads(base64.b64decode(response["patch"]))
        return response, jsonpatch.apply_patch(copy.deepcopy(obj), ops)
