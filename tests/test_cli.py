"""`gpu-policy check` / `mutate` / `certs` through a real subprocess, as CI would run them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import container, pod, wrap

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args], input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def write(path: Path, *docs: object) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_clean_manifest_exits_0(tmp_path: Path) -> None:
    f = write(tmp_path / "ok.yaml", wrap(pod(container(gpu=1)), "Deployment"), pod(container()))
    r = cli("check", "-f", str(f))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("2 object(s): 2 clean")


def test_violation_exits_1_with_server_message(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.yaml", pod(container()), wrap(pod(container("t", gpu="1.5")), "CronJob"))
    r = cli("check", "-f", str(f))
    assert r.returncode == 1
    assert f"DENY  {f} (document 2): CronJob ml/w: violates GPU policy:" in r.stdout
    assert (
        '      - gpu-quantity (container "t": spec.jobTemplate.spec.template.spec.containers[0].resources'
        '.limits["nvidia.com/gpu"] is "1.5"' in r.stdout
    )


def test_json_output_and_list_kind(tmp_path: Path) -> None:
    lst = {"apiVersion": "v1", "kind": "List", "items": [pod(container()), pod(container(gpu=1, privileged=True))]}
    f = tmp_path / "list.json"
    f.write_text(json.dumps(lst))
    r = cli("check", "-f", str(f), "-o", "json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert [x["where"] for x in out["results"]] == [f"{f} (document 1, items[0])", f"{f} (document 1, items[1])"]
    assert out["results"][1]["violations"][0]["rule"] == "no-privileged-gpu"
    assert out["results"][1]["message"].startswith("violates GPU policy: no-privileged-gpu")
    assert out["exitCode"] == 1


def test_unusable_input_exits_2_naming_file_and_document(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text(yaml.safe_dump(pod(container())) + "---\nkind: [unclosed\n")
    r = cli("check", "-f", str(f))
    assert r.returncode == 2
    assert f"ERROR {f} (document 2): not valid YAML at line" in r.stdout
    bad = pod(container())
    bad["spec"]["containers"] = "nope"
    g = write(tmp_path / "shape.yaml", bad)
    r = cli("check", "-f", str(g))
    assert r.returncode == 2
    assert f"{g} (document 1)" in r.stdout and "spec.containers must be a list, got string" in r.stdout
    r = cli("check", "-f", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "cannot read" in r.stdout
    h = tmp_path / "scalar.yaml"
    h.write_text("just a string\n")
    r = cli("check", "-f", str(h))
    assert r.returncode == 2 and "expected an object, got str" in r.stdout


def test_folder_and_stdin(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "a.yml", pod(container()))
    write(tmp_path / "b.yaml", pod(container(gpu="-1")))
    (tmp_path / "notes.txt").write_text("ignored")
    r = cli("check", "-f", str(tmp_path))
    assert r.returncode == 1 and "2 object(s): 1 denied, 1 clean" in r.stdout
    r = cli("check", "-f", "-", stdin=yaml.safe_dump(pod(container(gpu=1))))
    assert r.returncode == 0


def test_config_is_honoured_and_validated(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("rules:\n  gpu-quantity: warn\n")
    f = write(tmp_path / "p.yaml", pod(container(gpu="1.5")))
    r = cli("check", "-f", str(f), "--config", str(cfg))
    assert r.returncode == 0 and "WARN" in r.stdout and "would violate GPU policy: gpu-quantity" in r.stdout
    cfg.write_text("rulez: {}\n")
    r = cli("check", "-f", str(f), "--config", str(cfg))
    assert r.returncode == 2 and f"{cfg}: rulez: unknown key (did you mean rules?)" in r.stderr


def test_exempt_namespace_is_skipped(tmp_path: Path) -> None:
    # The chart's excluded namespaces (gpu-operator included) are the CLI's defaults too.
    for ns in ("kube-system", "gpu-operator"):
        f = write(tmp_path / "p.yaml", pod(container(gpu="1.5"), namespace=ns))
        assert cli("check", "-f", str(f)).returncode == 0
    unset = pod(container(gpu="1.5"))
    del unset["metadata"]["namespace"]
    f = write(tmp_path / "unset.yaml", unset)
    assert cli("check", "-f", str(f), "-n", "kube-system").returncode == 0  # -n fills a missing namespace
    assert cli("check", "-f", str(f), "-n", "ml").returncode == 1


def test_namespace_flag_never_overrides_an_explicit_namespace(tmp_path: Path) -> None:
    """kubectl refuses `-n kube-system` for an object declared in another namespace; so do we,
    or `-n kube-system` would skip a privileged GPU StatefulSet declared for `ml`."""
    f = write(tmp_path / "s.yaml", wrap(pod(container(gpu=1, privileged=True)), "StatefulSet"))
    r = cli("check", "-f", str(f), "-n", "kube-system")
    assert r.returncode == 2
    assert (
        'the namespace from the provided object "ml" does not match the namespace "kube-system". '
        "You must pass '--namespace=ml' to perform this operation." in r.stdout
    )
    assert cli("check", "-f", str(f), "-n", "ml").returncode == 1
    r = cli("mutate", "-f", str(f), "-n", "kube-system")
    assert r.returncode == 2 and "does not match" in r.stderr


def test_mutate_prints_patched_objects(tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", pod(container("t", gpu=1)), wrap(pod(container(gpu=1)), "Deployment"))
    r = cli("mutate", "-f", str(f), "--cluster-version", "v1.19.10-r0-CCE21.11.1.B006")
    assert r.returncode == 0, r.stderr
    mutated, deployment = list(yaml.safe_load_all(r.stdout))
    assert mutated["spec"]["containers"][0]["env"] == [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}]
    assert "env" not in deployment["spec"]["template"]["spec"]["containers"][0]
    assert "injected LD_LIBRARY_PATH" in r.stderr
    r = cli("mutate", "-f", str(f), "--cluster-version", "1.28")
    assert "LD_LIBRARY_PATH" not in r.stdout
    r = cli("mutate", "-f", str(f), "--cluster-version", "someday")
    assert r.returncode == 2 and "--cluster-version" in r.stderr


def test_certs_command(tmp_path: Path) -> None:
    out = tmp_path / "c"
    r = cli("certs", "--out", str(out), "--service", "svc", "--namespace", "ns", "--host", "127.0.0.1")
    assert r.returncode == 0, r.stderr
    assert "svc.ns.svc.cluster.local" in r.stdout
    for name in ("tls.key", "ca.key"):
        assert stat.S_IMODE(os.stat(out / name).st_mode) == 0o600
    r = cli("certs", "--out", str(out))
    assert r.returncode == 2 and "pass --force" in r.stderr
    assert cli("certs", "--out", str(out), "--force").returncode == 0


PIPELINE = {
    "apiVersion": "workflows.example.com/v1",
    "kind": "Pipeline",
    "metadata": {"name": "p", "namespace": "ml"},
    "spec": {"steps": [{"name": "train", "pod": {"spec": {"containers": [container("t", gpu="1.5")]}}}]},
}


def test_skips_say_why_and_gpu_bearing_unknown_kinds_are_never_a_bare_skip(tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"}, "data": {}}
    exempt = pod(container(gpu="1.5"), namespace="kube-system")
    f = write(tmp_path / "m.yaml", cm, PIPELINE, exempt)
    r = cli("check", "-f", str(f))
    assert r.returncode == 0, r.stdout
    assert f"SKIP  {f} (document 1): ConfigMap ml/c: kind not policed" in r.stdout
    assert f"SKIP  {f} (document 3): Pod kube-system/p: namespace exempt (exemptNamespaces)" in r.stdout
    notice = (
        "gpu-policy does not police Pipeline (workflows.example.com), which requests GPUs at "
        "spec.steps[0].pod.spec.containers[0]; judge it with customResources: "
        "[{group: workflows.example.com, kind: Pipeline, templates: ['spec.steps[*].pod']}]"
    )
    assert f"WARN  {f} (document 2): Pipeline ml/p: {notice}" in r.stdout
    assert cli("check", "-f", str(f), "--strict").returncode == 1
    out = json.loads(cli("check", "-f", str(f), "-o", "json").stdout)
    assert [x["reason"] for x in out["results"]] == [
        "kind not policed",
        "kind not policed, but it requests GPUs",
        "namespace exempt (exemptNamespaces)",
    ]
    # The suggested entry, pasted into a config, makes the kind judged.
    suggested = yaml.safe_load(notice.split("customResources: ", 1)[1])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"customResources": suggested}))
    r = cli("check", "-f", str(f), "--config", str(cfg))
    assert r.returncode == 1 and "spec.steps[0].pod.spec.containers[0].resources.limits" in r.stdout
