"""Serving TLS with a certificate that can change on disk under a running server.

Mounted Secrets are updated by a symlink swap, which sends no dependable inotify event,
so `CertReloader` polls a SHA-256 of the two files. A changed pair is loaded into a new
SSLContext first; only if it loads (the key matches the certificate) does it become the
context for new handshakes, picked in the SNI callback. Open connections keep the
context they were accepted with; a pair that does not load yet (files overwritten in place
are read half-way through, a Secret is updated file by file) is retried every RETRY_SECONDS,
quietly, and only a pair still broken after GRACE_SECONDS is one WARNING; the old one stays.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

log = logging.getLogger("gpu-policy.tls")

RETRY_SECONDS: Final = 0.5  # a pair in transition is read again this often
GRACE_SECONDS: Final = 5.0  # a changed pair that still does not load after this is a WARNING


def new_context(cert: str | Path, key: str | Path, client_ca: str | Path | None = None) -> ssl.SSLContext:
    """The serving context; with `client_ca`, a client must present a certificate that CA signed
    (the API server's, from its AdmissionConfiguration kubeConfigFile), or its handshake fails
    before a byte of HTTP is read."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])  # what we speak; clients that insist on ALPN get an answer
    ctx.load_cert_chain(str(cert), str(key))
    if client_ca is not None:
        ctx.load_verify_locations(cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def not_after(cert: Path) -> float:
    """The serving certificate's notAfter as a Unix timestamp (0.0 when it cannot be read)."""
    try:
        from cryptography import x509

        return x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc.timestamp()
    except (OSError, ValueError):
        return 0.0


class CertReloader:
    """Owns the listening SSLContext and swaps in new certificates for new handshakes."""

    def __init__(self, cert_dir: str | Path, interval: float = 10.0, client_ca: str | Path | None = None) -> None:
        self.cert = Path(cert_dir) / "tls.crt"
        self.key = Path(cert_dir) / "tls.key"
        self.client_ca = Path(client_ca) if client_ca is not None else None  # reloaded with the pair
        self.interval = interval
        self._digest = self._read_digest()
        self.context = new_context(self.cert, self.key, self.client_ca)  # fails fast at start-up
        self.context.sni_callback = self._pick
        self.current = self.context
        self.not_after = not_after(self.cert)
        self.on_reload: Callable[[], None] | None = None
        self.broken_since = 0.0  # the changed files first failed to load then (0: they did not)
        self.warned = ""  # the broken pair (its digest, or the read error) already warned about

    def _pick(self, sslobj: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        # OpenSSL calls this for every ClientHello, with or without SNI.
        if self.current is not self.context:
            sslobj.context = self.current

    def _read_digest(self) -> str:
        h = hashlib.sha256()
        h.update(self.cert.read_bytes())
        h.update(b"\0")
        h.update(self.key.read_bytes())
        if self.client_ca is not None:
            h.update(b"\0")
            h.update(self.client_ca.read_bytes())
        return h.hexdigest()

    def check(self) -> bool:
        """Reload when the files changed; True when a new pair is now served."""
        try:
            digest = self._read_digest()
        except OSError as exc:
            return self._broken(f"cannot read {self.cert} or {self.key} ({exc})", str(exc))
        if digest == self._digest:
            self.broken_since = 0.0
            return False
        try:
            fresh = new_context(self.cert, self.key, self.client_ca)
        except (ssl.SSLError, OSError) as exc:
            return self._broken(f"the new certificate in {self.cert.parent} does not load ({exc})", digest)
        self.broken_since = 0.0
        self.warned = ""
        self._digest = digest
        self.current = fresh
        self.not_after = not_after(self.cert)
        if self.on_reload is not None:
            self.on_reload()
        log.info("serving the new certificate from %s", self.cert)
        return True

    def _broken(self, why: str, which: str) -> bool:
        """A changed pair that does not load: DEBUG while it may be in transition, one WARNING
        (per broken pair) once it has not loaded for GRACE_SECONDS."""
        now = time.monotonic()
        if not self.broken_since:
            self.broken_since = now
        if now - self.broken_since < GRACE_SECONDS or which == self.warned:
            log.debug("%s; retrying, the current certificate stays", why)
        else:
            log.warning("%s for %.0f s; keeping the current certificate", why, now - self.broken_since)
            self.warned = which
        return False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(min(self.interval, RETRY_SECONDS) if self.broken_since else self.interval)
            self.check()
