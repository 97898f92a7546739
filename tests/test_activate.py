"""Config bytes become what the server runs by in one place (webhook.serve.reload.activate), at
start-up and on each reload: the digest is of the bytes the settings came from, the plan is built
before a request reads it, and the command line's --cluster-version holds over every reload, not
only the first file. In process, no server: each check is a function of its inputs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from webhook.config import ConfigError
from webhook.serve.reload import Active, ConfigReloader, activate

CONFIG = b"clusterVersion: '1.30'\nserver:\n  configReloadSeconds: 0\n"


def reloader(path: Path, active: Active, version: str | None = None) -> tuple[ConfigReloader, list[Active], list[str]]:
    current, counted = [active], []
    r = ConfigReloader(str(path), lambda: current[-1], current.append, counted.append, version)
    return r, current, counted


def test_the_digest_is_of_the_bytes_the_settings_came_from_and_the_plan_is_built() -> None:
    active = activate(CONFIG, "config.yaml")
    assert active.digest == hashlib.sha256(CONFIG).hexdigest()
    assert active.policy.cluster_version == (1, 30) and active.generation == 1
    assert active.policy.plan is not None  # no request pays for it
    assert active.effective["clusterVersion"] == "1.30"
    defaults = activate(None)
    assert defaults.digest == "" and defaults.policy.plan is not None


def test_a_changed_policy_is_planned_again() -> None:
    """The LD_LIBRARY_PATH mutation runs below 1.28 only: a new cluster version changes the plan."""
    new = activate(CONFIG).with_policy(cluster_version=(1, 27))
    assert new.policy.plan is not None
    assert new.policy.plan.mutations != activate(CONFIG).policy.plan.mutations  # type: ignore[union-attr]


def test_the_command_lines_cluster_version_holds_over_a_reload(tmp_path: Path) -> None:
    """`serve --cluster-version 1.27` with a file that says 1.30: 1.27 at start and after the file
    changes (a reload used to take the new file's version and drop the override)."""
    path = tmp_path / "config.yaml"
    path.write_bytes(CONFIG)
    active = activate(path.read_bytes(), str(path), version="1.27")
    assert active.policy.cluster_version == (1, 27) and not active.follows_version
    r, current, counted = reloader(path, active, "1.27")
    path.write_bytes(CONFIG + b"sharedGpu: true\n")
    assert r.check() and counted == ["ok"]
    assert current[-1].policy.cluster_version == (1, 27) and current[-1].policy.shared_gpu
    assert current[-1].generation == 2 and current[-1].policy.plan is not None


def test_clusterversion_auto_keeps_what_the_cluster_said(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"clusterVersion: auto\n")
    active = activate(path.read_bytes(), str(path))
    assert active.follows_version
    active = active.with_policy(cluster_version=(1, 31))  # as detect_version found it
    r, current, _ = reloader(path, active)
    path.write_bytes(b"clusterVersion: auto\nsharedGpu: true\n")
    assert r.check()
    assert current[-1].policy.cluster_version == (1, 31)


def test_bytes_that_are_not_utf8_are_refused_where_they_are(tmp_path: Path) -> None:
    """At start-up and on reload alike (a reload used to decode with replacement characters)."""
    bad = b"clusterVersion: '1.30'\nexemptNamespaces: [caf\xe9]\n"
    with pytest.raises(ConfigError, match=r"config.yaml: not UTF-8 at byte 45 \(line 2\)"):
        activate(bad, "config.yaml")
    path = tmp_path / "config.yaml"
    path.write_bytes(CONFIG)
    r, current, counted = reloader(path, activate(CONFIG, str(path)))
    path.write_bytes(bad)
    assert not r.check() and counted == ["error"] and len(current) == 1
