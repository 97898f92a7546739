"""A REAL kube-apiserver v1.36 with its etcd, on loopback, for tests/test_real_apiserver.py and
`make bench-native`, run only where one is found: kube-apiserver and etcd binaries in $KUBE136_BIN
(default /tmp/kube136/kube/bin), e.g. `make WHAT=cmd/kube-apiserver` in a kubernetes v1.36.2
checkout and an etcd v3.6 release (`SKIP` says so where they are absent).

Started as a control plane runs it for admission: RBAC, a static admin token, every admission
plugin on except ServiceAccount (no controller manager creates the default account), and
privileged pods allowed, as every cluster that runs GPU operators allows them.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BIN = Path(os.environ.get("KUBE136_BIN", "/tmp/kube136/kube/bin"))
SKIP = f"no real kube-apiserver here: kube-apiserver and etcd v1.36 in $KUBE136_BIN ({BIN}; tests/realapi.py)"
TOKEN = "gpu-policy-test-admin-token"
PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


def available() -> bool:
    """Whether the real API server and etcd are built here."""
    return (BIN / "kube-apiserver").exists() and (BIN / "etcd").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _json(raw: bytes) -> dict[str, Any]:
    try:
        out = json.loads(raw or b"{}")
    except ValueError:
        return {"text": raw.decode(errors="replace")}  # /readyz answers text
    return out if isinstance(out, dict) else {"value": out}


class RealApi:
    def __init__(self, url: str) -> None:
        self.url = url
        self.ctx = ssl.create_default_context()
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE  # its self-signed serving certificate, on loopback

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        """Status, JSON body and every header in order (a dict would keep one of several Warnings)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
                return r.status, _json(r.read()), list(r.headers.items())
        except urllib.error.HTTPError as e:
            return e.code, _json(e.read()), list(e.headers.items())

    def create_pod(self, pod: dict[str, Any]) -> tuple[int, dict[str, Any], list[str]]:
        code, body, headers = self.call("POST", "/api/v1/namespaces/ml/pods?dryRun=All", pod)
        warnings = [v for k, v in headers if k.lower() == "warning"]
        return code, body, warnings

    def create_all(self, docs: list[dict[str, Any]], kinds: tuple[str, ...]) -> list[str]:
        """Create every rendered admissionregistration document of these kinds; their paths, for
        the cleanup. A refusal says each cause after the expression it quotes."""
        created = []
        for kind in kinds:
            for doc in (d for d in docs if d["kind"] == kind):
                path = f"/apis/admissionregistration.k8s.io/v1/{PLURALS[kind]}"
                code, body, _ = self.call("POST", path, doc)
                causes = body.get("details", {}).get("causes", [])
                assert code == 201, [(x.get("field"), x.get("message", "").split('": ', 1)[-1][:700]) for x in causes]
                created.append(f"{path}/{doc['metadata']['name']}")
        return created


@contextmanager
def running(tmp: Path) -> Iterator[RealApi]:
    """etcd and kube-apiserver in `tmp`, ready, with the namespace `ml`; both stopped after."""
    etcd_port, peer, secure = free_port(), free_port(), free_port()
    key = tmp / "sa.key"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(tmp / "sa.pub")], check=True, capture_output=True
    )
    (tmp / "tokens.csv").write_text(f'{TOKEN},admin,admin-uid,"system:masters"\n')
    logs = (tmp / "etcd.log").open("w"), (tmp / "apiserver.log").open("w")
    etcd = subprocess.Popen(
        [
            str(BIN / "etcd"),
            "--data-dir",
            str(tmp / "etcd"),
            "--listen-client-urls",
            f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
        ],
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    api = subprocess.Popen(
        [
            str(BIN / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            f"--secure-port={secure}",
            f"--cert-dir={tmp / 'certs'}",
            f"--token-auth-file={tmp / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={tmp / 'sa.pub'}",
            f"--service-account-signing-key-file={key}",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
        ],
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    client = RealApi(f"https://127.0.0.1:{secure}")
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if client.call("GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError((tmp / "apiserver.log").read_text()[-3000:])
        client.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
        yield client
    finally:
        for proc in (api, etcd):
            proc.terminate()
            proc.wait(timeout=20)
        for f in logs:
            f.close()
        shutil.rmtree(tmp / "etcd", ignore_errors=True)


def webhook_configs(docs: list[dict[str, Any]], port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The chart's two webhook configurations, pointed at a server process on loopback (a URL
    instead of the Service, with that server's CA; no namespaceSelector: every namespace)."""
    ca = base64.b64encode(ca_pem).decode()
    configs = []
    for doc in docs:
        if doc["kind"] not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        config = copy.deepcopy(doc)
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"].get("path", "/validate")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
            hook.pop("namespaceSelector", None)
        config["metadata"] = {"name": config["metadata"]["name"]}
        configs.append(config)
    return configs
