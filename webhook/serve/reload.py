"""Live policy reload: the config file is watched and swapped in between requests.

The chart mounts the policy from a ConfigMap, which the kubelet updates by swapping a `..data`
symlink; reading the file through its path follows the swap. The file is read every
`server.configReloadSeconds` (a few hundred bytes: cheaper than tracking inodes through
symlinks) and at once on SIGHUP. A changed file is validated in full, exactly like at start-up;
only a valid policy replaces the active one, in a single assignment that requests pick up on
their next read. A bad file is logged with every key that is wrong, counted, and the old policy
keeps serving. The `server.*` section is compared whole: the reload period and the drain apply at
once (they are read where they are used); the rest (limits and deadlines built into the listening
transport, the certificate and version periods, the cluster view) is logged as waiting for a
restart, and the running values stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Final

from ..config import ConfigError, ServerSettings, Settings, from_text
from ..policy import Policy

log = logging.getLogger("gpu-policy.reload")


@dataclass(frozen=True, slots=True)
class Active:
    """What the process runs by, swapped as one value: the policy requests are judged by (with the
    plan it runs and the cluster facts it reads), the server settings in force, and where they
    came from."""

    policy: Policy
    server: ServerSettings
    generation: int  # 1 at start-up, +1 per successful reload
    digest: str  # sha256 of the config file's bytes ("" for built-in defaults)


def activate(settings: Settings, generation: int = 1, digest: str = "") -> Active:
    return Active(settings.policy, settings.server, generation, digest)


# The server settings a reload applies at once: each is read where it is used, each time.
LIVE: Final = frozenset({"config_reload_seconds", "drain_seconds"})


def server_changes(new: ServerSettings, running: ServerSettings) -> tuple[ServerSettings, list[str], list[str]]:
    """What a reload runs with (the live fields from the file, the rest as running), and the
    config keys changed: (settings, applied, waiting for a restart)."""
    changed = [f.name for f in fields(ServerSettings) if getattr(new, f.name) != getattr(running, f.name)]
    live = {name: getattr(new, name) for name in changed if name in LIVE}
    applied = [ServerSettings.key(name) for name in changed if name in LIVE]
    waiting = [ServerSettings.key(name) for name in changed if name not in LIVE]
    return replace(running, **live), applied, waiting


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ConfigReloader:
    """Watches `path` and swaps `cell.active` when it holds a new, valid policy."""

    def __init__(
        self,
        path: str,
        get: Callable[[], Active],
        put: Callable[[Active], None],
        count: Callable[[str], None],
    ) -> None:
        self.path = path
        self.get = get
        self.put = put
        self.count = count  # result -> metrics ("ok", "error", "unchanged" is not counted)
        self.wake = asyncio.Event()
        self.rejected = ""  # digest of the last file refused: not re-logged every period

    def check(self) -> bool:
        """Reload if the file changed; True when a new policy became active."""
        try:
            data = Path(self.path).read_bytes()
        except OSError as exc:
            log.error("config reload: cannot read %s: %s; the current policy stays", self.path, exc)
            self.count("error")
            return False
        digest = digest_of(data)
        active = self.get()
        if digest in (active.digest, self.rejected):
            return False
        try:
            loaded = from_text(data.decode("utf-8", errors="replace"), source=self.path)
        except ConfigError as exc:
            log.error("config reload rejected, the current policy stays:\n%s", exc)
            self.count("error")
            self.rejected = digest  # tried again only once the file changes
            return False
        if loaded.cluster_version_auto:  # the version last read from the cluster, not a restart's
            loaded = loaded.with_cluster_version(active.policy.cluster_version)
        # The cluster view belongs to the process, not the file: the new policy sees the same cluster.
        loaded = replace(loaded, policy=replace(loaded.policy, cluster=active.policy.cluster))
        server, applied, waiting = server_changes(loaded.server, active.server)
        if applied:
            log.info("config reload: %s applied", ", ".join(applied))
        if waiting:
            log.warning(
                "config reload: %s changed; the server keeps the running values until a restart", ", ".join(waiting)
            )
        self.put(Active(loaded.policy, server, active.generation + 1, digest))
        self.count("ok")
        log.info("config reloaded: generation %d, sha256 %s", active.generation + 1, digest[:12])
        return True

    async def run(self) -> None:
        while True:
            period = self.get().server.config_reload_seconds  # a reload may change it
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=period if period > 0 else None)
            self.wake.clear()
            try:
                self.check()
            except Exception:  # a reload bug must never take the server down
                log.exception("config reload failed; the current policy stays")
                self.count("error")


class VersionWatcher:
    """clusterVersion auto: reads /version again every `period` seconds, and when the cluster
    view's watch reconnects after a break (an API server restart is how upgrades look), so a control-plane upgrade
    past 1.28 stops the version-gated mutation without a restart. An unreadable /version keeps the
    last known version (never flips to unknown on a network blip)."""

    def __init__(
        self,
        period: float,
        detect: Callable[[], tuple[int, int] | None],
        get: Callable[[], Active],
        put: Callable[[Active], None],
    ) -> None:
        self.period = period
        self.detect = detect
        self.get = get
        self.put = put
        self.wake = asyncio.Event()  # set when the cluster view's watch reconnects

    def apply(self, version: tuple[int, int] | None) -> bool:
        active = self.get()
        if version is None or version == active.policy.cluster_version:
            return False
        self.put(replace(active, policy=replace(active.policy, cluster_version=version)))
        old = active.policy.cluster_version
        log.info(
            "cluster version changed: %s -> %d.%d",
            f"{old[0]}.{old[1]}" if old else "unknown",
            version[0],
            version[1],
        )
        return True

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=self.period)
            self.wake.clear()
            try:
                self.apply(await loop.run_in_executor(None, self.detect))
            except Exception:  # never take the server down for this
                log.exception("reading the cluster version failed; the last known one stays")
