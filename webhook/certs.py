"""A CA and a serving certificate for the webhook Service, the names the API server dials.

The API server connects to `https://<service>.<namespace>.svc:443` and verifies the
certificate against the caBundle of the webhook configuration, so the leaf carries every
DNS spelling of the Service as a SAN (Go ignores the CN).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")


class CertsExistError(FileExistsError):
    pass


@dataclass(frozen=True, slots=True)
class Bundle:
    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def service_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate(
    service: str,
    namespace: str,
    *,
    days: int = 365,
    extra_hosts: tuple[str, ...] = (),
    now: dt.datetime | None = None,
) -> Bundle:
    """A fresh CA (ECDSA P-256) and a leaf for the Service names plus `extra_hosts` (DNS or IP)."""
    now = now or dt.datetime.now(dt.UTC)
    not_before = now - dt.timedelta(minutes=5)  # tolerate clock skew between nodes
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gpu-policy CA ({service}.{namespace})")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    names = service_names(service, namespace)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    for host in extra_hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[2])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Bundle(ca_cert.public_bytes(pem), _pem_key(ca_key), cert.public_bytes(pem), _pem_key(key))


def write(bundle: Bundle, out: str | os.PathLike[str], *, force: bool = False) -> list[Path]:
    """Write the four files; keys are 0600 from the moment they exist."""
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / name for name in FILES]
    existing = [p for p in paths if p.exists()]
    if existing and not force:
        raise CertsExistError(f"{', '.join(str(p) for p in existing)} already exist; pass --force to replace them")
    contents = dict(zip(FILES, (bundle.ca_cert, bundle.ca_key, bundle.cert, bundle.key), strict=True))
    for path in paths:
        secret = path.name.endswith(".key")
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(contents[path.name])
        os.chmod(tmp, 0o600 if secret else 0o644)
        os.replace(tmp, path)  # atomic: a reloading server never reads half a file
    return paths
