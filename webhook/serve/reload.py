"""Live policy reload: the config file is watched and swapped in between requests.

The chart mounts the policy from a ConfigMap, which the kubelet updates by swapping a `..data`
symlink; reading the file through its path follows the swap. The file is read every
`server.configReloadSeconds` (a few hundred bytes: cheaper than tracking inodes through
symlinks) and at once on SIGHUP. A changed file is validated in full, exactly like at start-up;
only a valid policy replaces the active one, in a single assignment that requests pick up on
their next read. A bad file is logged with every key that is wrong, counted, and the old policy
keeps serving. The `server.*` settings (body limit, reload periods, drain) belong to the running
process: changing them is reported as needing a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import ConfigError, Settings, from_text
from ..policy import Policy

log = logging.getLogger("gpu-policy.reload")


@dataclass(frozen=True, slots=True)
class Active:
    """What requests are judged by: a policy and where it came from, swapped as one value."""

    policy: Policy
    generation: int  # 1 at start-up, +1 per successful reload
    digest: str  # sha256 of the config file's bytes ("" for built-in defaults)


def activate(settings: Settings, generation: int = 1, digest: str = "") -> Active:
    return Active(settings.policy, generation, digest)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ConfigReloader:
    """Watches `path` and swaps `cell.active` when it holds a new, valid policy."""

    def __init__(
        self,
        path: str,
        settings: Settings,
        get: Callable[[], Active],
        put: Callable[[Active], None],
        count: Callable[[str], None],
    ) -> None:
        self.path = path
        self.settings = settings  # what is running: server.* and the detected cluster version
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
        changed = server_changes(loaded, self.settings)
        if changed:
            log.warning(
                "config reload: %s changed; the server keeps the running values until a restart",
                ", ".join(f"server.{key}" for key in changed),
            )
        self.put(activate(loaded, active.generation + 1, digest))
        self.count("ok")
        log.info("config reloaded: generation %d, sha256 %s", active.generation + 1, digest[:12])
        return True

    async def run(self) -> None:
        period = self.settings.config_reload_seconds
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=period if period > 0 else None)
            self.wake.clear()
            try:
                self.check()
            except Exception:  # a reload bug must never take the server down
                log.exception("config reload failed; the current policy stays")
                self.count("error")


def server_changes(loaded: Settings, running: Settings) -> list[str]:
    """Every `server.*` key whose value differs from the running server's (all of them apply at
    start-up only: limits and timeouts are built into the transport then)."""
    new, old = loaded.effective.get("server", {}), running.effective.get("server", {})
    return sorted(key for key in new.keys() | old.keys() if new.get(key) != old.get(key))


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
        policy = replace(active.policy, cluster_version=version)
        self.put(Active(policy, active.generation, active.digest))
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
