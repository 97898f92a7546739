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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final

from ..config import ConfigError, ServerSettings, from_bytes, from_mapping, with_version
from ..policy import Policy, engine

log = logging.getLogger("gpu-policy.reload")


@dataclass(frozen=True, slots=True)
class Active:
    """What the process runs by, swapped as one value: the policy requests are judged by (its plan
    built before the first request reads it, and the cluster facts it reads), the server settings
    in force, and where they came from. Made by `activate` alone; every later change (a reload, a
    new cluster view, a new cluster version) goes through `with_policy`, which plans again."""

    policy: Policy
    server: ServerSettings
    generation: int  # 1 at start-up, +1 per successful reload
    digest: str  # sha256 of the config file's bytes ("" for built-in defaults)
    follows_version: bool = False  # clusterVersion auto, not overridden: the cluster's version is read
    effective: Mapping[str, Any] = field(default_factory=dict, compare=False)  # what start-up logs

    def with_policy(self, **changes: Any) -> Active:
        """This Active with the policy's `changes`, planned now (dataclasses.replace does not copy
        the plan: a changed policy derives its own)."""
        return replace(self, policy=planned(replace(self.policy, **changes)))


def planned(policy: Policy) -> Policy:
    """`policy` with its plan built (engine.plan keeps it on the policy): requests only read it."""
    engine.plan(policy)
    return policy


def activate(
    data: bytes | None,
    source: str = "config",
    *,
    version: str | None = None,
    after: Active | None = None,
    environ: Mapping[str, str] | None = None,
) -> Active:
    """The one way config bytes become what the process runs by, at start-up and on each reload:
    decoded and validated in full (ConfigError names every wrong key), `version` (the command
    line's --cluster-version: a version or "unknown") over the file's, the digest of exactly these
    bytes (a file read once: never the settings of one read with the digest of another), and the
    plan built. After a reload (`after`, the running Active) what the process learned itself
    carries over: the cluster view, and with clusterVersion auto the version last read from the
    cluster. `data` None is the built-in defaults."""
    settings = from_bytes(data, source, environ) if data is not None else from_mapping({}, environ=environ)
    if version:
        settings = with_version(settings, version)
    policy = settings.policy
    if after is not None:
        kept: dict[str, Any] = {"cluster": after.policy.cluster}
        if settings.cluster_version_auto:
            kept["cluster_version"] = after.policy.cluster_version
        policy = replace(policy, **kept)
    return Active(
        planned(policy),
        settings.server,
        1 if after is None else after.generation + 1,
        digest_of(data) if data is not None else "",
        settings.cluster_version_auto,
        settings.effective,
    )


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
        version: str | None = None,
    ) -> None:
        self.path = path
        self.version = version  # --cluster-version: it holds over every file, not only the first
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
            loaded = activate(data, self.path, version=self.version, after=active)
        except ConfigError as exc:
            log.error("config reload rejected, the current policy stays:\n%s", exc)
            self.count("error")
            self.rejected = digest  # tried again only once the file changes
            return False
        server, applied, waiting = server_changes(loaded.server, active.server)
        if applied:
            log.info("config reload: %s applied", ", ".join(applied))
        if waiting:
            log.warning(
                "config reload: %s changed; the server keeps the running values until a restart", ", ".join(waiting)
            )
        self.put(replace(loaded, server=server))
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
        self.put(active.with_policy(cluster_version=version))
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
