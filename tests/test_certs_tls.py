"""Certificates from `webhook.certs`, and hot reload in a running server."""

from __future__ import annotations

import ipaddress
import os
import shutil
import ssl
import stat
import time
from pathlib import Path

import pytest
from cryptography import x509

from tests.helpers import container, pod
from webhook import certs


def test_leaf_names_every_service_spelling(tmp_path: Path) -> None:
    bundle = certs.generate("gpu-policy", "platform", days=30, extra_hosts=("localhost", "127.0.0.1"))
    leaf = x509.load_pem_x509_certificate(bundle.cert)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "gpu-policy",
        "gpu-policy.platform",
        "gpu-policy.platform.svc",
        "gpu-policy.platform.svc.cluster.local",
        "localhost",
    ]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    ca = x509.load_pem_x509_certificate(bundle.ca_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    leaf.verify_directly_issued_by(ca)
    assert 29 <= (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days <= 31


def test_write_modes_and_no_overwrite(tmp_path: Path) -> None:
    paths = certs.write(certs.generate("s", "n"), tmp_path)
    assert [p.name for p in paths] == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert stat.S_IMODE(os.stat(tmp_path / "tls.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "tls.crt").st_mode) == 0o644
    with pytest.raises(certs.CertsExistError):
        certs.write(certs.generate("s", "n"), tmp_path)
    certs.write(certs.generate("s", "n"), tmp_path, force=True)


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_rotation_without_restart(start_server, tmp_path: Path) -> None:
    live = tmp_path / "live"
    certs.write(certs.generate("gpu-policy", "gpu-policy"), live)
    old_ca = tmp_path / "old-ca.crt"
    shutil.copy(live / "ca.crt", old_ca)
    server = start_server({"server": {"certReloadSeconds": 0.2}, "clusterVersion": "unknown"}, certs_from=live)

    from tests.apiserver import ApiServer

    old_client = ApiServer(server.port, str(old_ca))
    assert old_client.validate(pod(container()))["allowed"] is True  # connection opened with the old pair

    # A broken pair (key of another certificate) is refused and the old one stays. Files in
    # transition (a Secret updated file by file) are retried quietly: one WARNING only once the
    # pair has not loaded for GRACE_SECONDS, never an ERROR.
    other = certs.generate("gpu-policy", "gpu-policy")
    (live / "tls.key").write_bytes(other.key)
    time.sleep(0.8)
    fresh_old = ApiServer(server.port, str(old_ca))
    assert fresh_old.get("/healthz").status == 200
    fresh_old.close()
    assert "does not load" not in server.log.read_text()
    assert _wait(lambda: "does not load" in server.log.read_text(), 10.0)
    time.sleep(1.0)
    (warned,) = [line for line in server.log.read_text().splitlines() if "does not load" in line]
    assert " WARNING " in warned and "for 5 s; keeping the current certificate" in warned
    assert server.log_problems() == []

    # A complete new pair from a new CA: new handshakes get it, without a restart.
    certs.write(other, live, force=True)
    new_client = ApiServer(server.port, str(live / "ca.crt"))

    def serves_new() -> bool:
        try:
            return new_client.get("/healthz").status == 200
        except ssl.SSLError:
            new_client.close()
            return False

    assert _wait(serves_new)
    assert server.proc.poll() is None
    with pytest.raises(ssl.SSLCertVerificationError):
        ApiServer(server.port, str(old_ca)).get("/healthz")
    # The connection opened before the rotation is still served.
    assert old_client.validate(pod(container(gpu="1.5")))["allowed"] is False
    assert "gpu_policy_certificate_reloads_total 1.0" in server.scrape()
    old_client.close()
    new_client.close()


def test_server_refuses_to_start_without_certificates(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            "--cert-dir",
            str(tmp_path),
            "--port",
            "1",
            "--cluster-version",
            "unknown",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "cannot load" in r.stderr


def _client_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CA (as the API server's client CA) and a client certificate it signed: ca, cert, key."""
    import datetime as dt

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    authority = certs.generate("apiserver-clients", "kube-system")
    ca_cert = x509.load_pem_x509_certificate(authority.ca_cert)
    ca_key = serialization.load_pem_private_key(authority.ca_key, None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-webhook-client")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    paths = tmp_path / "client-ca.crt", tmp_path / "client.crt", tmp_path / "client.key"
    paths[0].write_bytes(authority.ca_cert)
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def test_client_ca_serves_only_the_api_servers_certificate(cert_dir: Path, tmp_path: Path) -> None:
    """--client-ca: a review with the API server's client certificate is answered; a client
    without one, or with a certificate another CA signed, fails the TLS handshake before any HTTP
    is read (nothing else on the network can make the server work); the plain metrics port, where
    probes go, still answers. The log stays clean."""
    import signal
    import socket
    import subprocess
    import sys
    import urllib.request

    from tests.helpers import ROOT, free_port
    from tests.rawhttp import HOST, post, review

    ca, client_cert, client_key = _client_pair(tmp_path)
    (tmp_path / "other").mkdir()
    stranger = _client_pair(tmp_path / "other")
    port, metrics = free_port(), free_port()
    cmd = [sys.executable, "-m", "webhook", "serve", "--cert-dir", str(cert_dir), "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--metrics-port", str(metrics), "--client-ca", str(ca), "--cluster-version", "1.30"]
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
                time.sleep(0.05)

        def ask(pair: tuple[Path, Path] | None) -> int:
            context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
            if pair is not None:
                context.load_cert_chain(str(pair[0]), str(pair[1]))
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                context.wrap_socket(raw, server_hostname=HOST.decode()) as s,
            ):
                s.sendall(post(review()))
                try:
                    head = s.recv(65536)
                except (ssl.SSLError, ConnectionError):
                    return 0  # TLS 1.3: the server's alert arrives after the client's handshake
                return int(head.split()[1]) if head else 0

        assert ask((client_cert, client_key)) == 200
        for pair in (None, (stranger[1], stranger[2])):
            try:
                status = ask(pair)
            except (ssl.SSLError, ConnectionError):
                status = 0
            assert status == 0, pair
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    text = log.read_text()
    assert proc.returncode == 0 and "Traceback" not in text and " ERROR " not in text
