"""Live config reload, the way the chart's ConfigMap changes: the kubelet writes the new file in a
fresh folder and swaps the `..data` symlink; the server picks it up between requests, rejects a bad
file while the old policy keeps serving, reloads at once on SIGHUP, and in every worker."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import Server, container, pod

PRIVILEGED = pod(container("t", gpu=1, privileged=True))


class ConfigMapVolume:
    """A ConfigMap volume as the kubelet lays it out (AtomicWriter): config.yaml -> ..data/config.yaml,
    ..data -> ..<timestamp>, swapped with a rename so readers never see a half-written file."""

    def __init__(self, root: Path, config: dict[str, Any]) -> None:
        self.root = root
        root.mkdir()
        self.n = 0
        self.write(config)
        (root / "config.yaml").symlink_to("..data/config.yaml")

    @property
    def path(self) -> str:
        return str(self.root / "config.yaml")

    def write(self, config: dict[str, Any] | str) -> None:
        self.n += 1
        folder = self.root / f"..2026_12_01_00_00_{self.n:02d}"
        folder.mkdir()
        (folder / "config.yaml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))
        tmp_link = self.root / "..data_tmp"
        tmp_link.symlink_to(folder.name)
        os.rename(tmp_link, self.root / "..data")


def base(period: float = 0.2, **extra: Any) -> dict[str, Any]:
    return {"clusterVersion": "1.30", "server": {"configReloadSeconds": period}, **extra}


def until(predicate: Callable[[], bool], timeout: float = 10.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def metric(server: Server, name: str) -> float:
    for line in server.scrape().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def allowed(server: Server) -> bool:
    client = server.client()
    try:
        return bool(client.validate(PRIVILEGED)["allowed"])
    finally:
        client.close()


def test_configmap_update_is_picked_up_bad_files_are_rejected(
    start_server: Callable[..., Server], tmp_path: Path
) -> None:
    volume = ConfigMapVolume(tmp_path / "config", base())
    server = start_server(None, "--config", volume.path)
    assert not allowed(server)
    assert metric(server, "gpu_policy_config_generation") == 1

    volume.write(base(rules={"no-privileged-gpu": "warn"}))
    took = until(lambda: allowed(server))
    assert took < 5, took
    assert metric(server, "gpu_policy_config_generation") == 2
    assert metric(server, 'gpu_policy_config_reloads_total{result="ok"}') == 1

    volume.write(base(rules={"no-privileged-gpu": "deny"}, rulez={}))  # a typo: rejected
    until(lambda: metric(server, 'gpu_policy_config_reloads_total{result="error"}') == 1)
    assert allowed(server), "the last good policy keeps serving"
    assert metric(server, "gpu_policy_config_generation") == 2
    log = server.log.read_text()
    assert "config reload rejected" in log and "rulez: unknown key (did you mean rules?)" in log
    time.sleep(0.6)  # several periods: a rejected file is reported once, not every period
    assert metric(server, 'gpu_policy_config_reloads_total{result="error"}') == 1

    volume.write("rules: {no-privileged-gpu: deny}\nclusterVersion: '1.30'\nserver: {configReloadSeconds: 0.2}\n")
    until(lambda: not allowed(server))
    assert metric(server, "gpu_policy_config_generation") == 3


def test_sighup_reloads_at_once_and_every_worker_reloads(start_server: Callable[..., Server], tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "config", base(period=0))  # 0: only on SIGHUP
    server = start_server(None, "--config", volume.path, "--workers", "2")
    assert not allowed(server)
    volume.write(base(period=0, rules={"no-privileged-gpu": "off"}))
    time.sleep(0.5)
    assert not allowed(server), "with configReloadSeconds 0 only SIGHUP reloads"
    server.proc.send_signal(signal.SIGHUP)
    until(lambda: all(allowed(server) for _ in range(20)))  # 20 new connections: both workers


def test_reload_under_load_fails_no_request(start_server: Callable[..., Server], tmp_path: Path) -> None:
    """Requests keep flowing while the policy is swapped: none fails, and once the new policy is
    seen, no later request is judged by the old one."""
    volume = ConfigMapVolume(tmp_path / "config", base(period=0.1))
    server = start_server(None, "--config", volume.path)
    results: list[tuple[float, bool]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def load() -> None:
        client = server.client()
        try:
            for _ in range(2000):  # bounded
                if stop.is_set():
                    break
                results.append((time.monotonic(), bool(client.validate(PRIVILEGED)["allowed"])))
        except BaseException as exc:  # any failure is the test's failure
            errors.append(exc)
        finally:
            client.close()

    thread = threading.Thread(target=load)
    thread.start()
    time.sleep(0.3)
    volume.write(base(period=0.1, rules={"no-privileged-gpu": "warn"}))
    until(lambda: sum(ok for _, ok in results) >= 20, timeout=30)  # well past the swap
    stop.set()
    thread.join(timeout=30)
    assert not errors, errors
    verdicts = [ok for _, ok in results]
    first_new = verdicts.index(True)
    assert first_new > 0 and all(verdicts[first_new:]), "after the swap every request sees the new policy"
    assert first_new >= 3 and len(verdicts) - first_new >= 20


def test_a_reload_names_every_server_key_it_cannot_apply(start_server: Callable[..., Server], tmp_path: Path) -> None:
    """Issue 33: headerSeconds, idleSeconds, bodySeconds changed by a reload were silently not applied."""
    volume = ConfigMapVolume(tmp_path / "config", base())
    server = start_server(None, "--config", volume.path)
    changed = base()
    changed["server"].update({"headerSeconds": 3.0, "idleSeconds": 30.0, "bodySeconds": 4.0})
    changed["rules"] = {"no-privileged-gpu": "off"}
    volume.write(changed)
    until(lambda: allowed(server))  # the policy part is applied live
    until(lambda: "server.idleSeconds, server.bodySeconds, server.headerSeconds changed" in server.log.read_text())


def test_a_reload_applies_the_drain_and_the_reload_period_at_once(
    start_server: Callable[..., Server], tmp_path: Path
) -> None:
    """The server section is compared whole: drainSeconds and configReloadSeconds are read where they
    are used, so a reload applies them (said in the log); SIGTERM then drains for the new period."""
    volume = ConfigMapVolume(tmp_path / "config", base(server={"configReloadSeconds": 0.2, "drainSeconds": 5.0}))
    server = start_server(None, "--config", volume.path)
    volume.write(base(server={"configReloadSeconds": 0.3, "drainSeconds": 0.4}))
    until(lambda: "server.configReloadSeconds, server.drainSeconds applied" in server.log.read_text())
    assert "keeps the running values" not in server.log.read_text()
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(10)
    assert time.monotonic() - started < 3.0  # the new 0.4 s, not the 5 s it started with
    assert "draining for 0.4 s" in server.log.read_text()
