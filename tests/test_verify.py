"""`gpu-policy verify` against the stand-in API server, playing the rest of the cluster from
recordings: the scheduler binds probes (or leaves them Pending with its own event), the kubelet
runs them and their logs are real `nvidia-smi -L` outputs, and dry-run creates go through the
real gpu-policy server as the API server's admission chain would call it.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver import ApiServer
from tests.chart import render
from tests.helpers import GPU, GPU_TAINT, ROOT, T4_LABELS, Server, node
from tests.kubeapi import KubeApi, status
from tests.kubelet import cluster, device_plugin
from webhook.policy import ALL_RULES, Mode, ObjectRule, Rule


@pytest.fixture
def kube(cert_dir: Path) -> Iterator[KubeApi]:
    api = KubeApi(cert_dir).start()
    api.put(
        *(node(f"gke-t4-pool-{i}", T4_LABELS, {GPU: "2", "nvidia.com/gpu.shared": "0"}, [GPU_TAINT]) for i in range(2)),
        node("cpu-0", {"pool": "cpu"}),
        *(device_plugin(f"gke-t4-pool-{i}") for i in range(2)),
    )
    yield api
    api.close()


def admission(server: Server) -> Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]:
    """The API server's admission chain for pods: our mutating webhook, then our validating one."""

    def admit(obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        client: ApiServer = server.client()
        try:
            _response, patched = client.mutate(obj)
            checked = client.validate(patched)
        finally:
            client.close()
        if not checked["allowed"]:
            message = checked["status"]["message"]
            return 403, status(
                403, "Forbidden", f'admission webhook "pods.validate.gpu-policy.io" denied the request: {message}'
            )
        return 201, patched

    return admit


def verify(
    kube: KubeApi, tmp_path: Path, *args: str, wait: bool = True
) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig(tmp_path / "kubeconfig")), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    cmd = [sys.executable, "-m", "webhook", "verify", "--timeout", "20", *args]
    if not wait:
        # Started with SIGINT ignored, as a job runner (or a test runner's worker, after some test
        # there ignored it) may start it: verify must still clean up on Ctrl-C.
        return subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


def leftovers(kube: KubeApi) -> list[Any]:
    return kube.call(
        lambda: (
            [k for k, o in kube.objects["pods"].items() if "gpu-policy-verify" in k[1]]
            + [k for k in kube.objects["configmaps"]]
        )
    )


def checks(r: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in json.loads(r.stdout)["checks"]}


def test_a_healthy_recording_passes_and_every_probe_is_deleted(kube: KubeApi, server: Server, tmp_path: Path) -> None:
    kube.admit = admission(server)
    cluster(kube)
    r = verify(kube, tmp_path, "-o", "json")
    assert isinstance(r, subprocess.CompletedProcess)
    assert r.returncode == 0, r.stdout + r.stderr
    found = checks(r)
    assert {n: c["status"] for n, c in found.items()} == {
        "device-plugin": "pass",
        "gpu-nodes": "pass",
        "requests-enforced": "pass",
        "no-request-sees-none": "pass",
        "isolation nvidia.com/gpu": "pass",
        "webhook-denies-visible-devices": "pass",
        "webhook-denies-privileged": "pass",
        "webhook-voids-plain-pod": "pass",
        "native-isolation": "skip",  # this API server serves no admissionregistration.k8s.io/v1 MAP
        "native-rules": "skip",  # nor VAP
    }
    seen = found["isolation nvidia.com/gpu"]["evidence"]["probes"]
    assert len(seen) == 2 and len({tuple(units) for units in seen.values()}) == 2
    assert found["isolation nvidia.com/gpu"]["evidence"]["shared"] == []
    assert found["no-request-sees-none"]["evidence"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert (
        "violates GPU policy: no-visible-devices-env" in found["webhook-denies-visible-devices"]["evidence"]["message"]
    )
    assert leftovers(kube) == []
    assert json.loads(r.stdout)["cleanedUp"] is True
    # Probes ran through the scheduler, non-root, tolerating GPU taints, owned by the run's ConfigMap.
    created = [
        obj
        for _rv, kind, obj in kube.call(lambda: list(kube.history["pods"]))
        if kind == "ADDED" and "verify" in obj["metadata"]["name"]
    ]
    assert len(created) == 4  # one with a GPU, one without, two for isolation
    spec = created[0]["spec"]
    assert spec["containers"][0]["securityContext"]["runAsNonRoot"] is True
    assert spec["tolerations"] == [{"operator": "Exists", "effect": "NoSchedule"}]
    assert "nodeName" not in spec
    assert created[0]["metadata"]["ownerReferences"][0]["kind"] == "ConfigMap"
    assert "verify: probe gpu-policy-verify-" in r.stderr  # progress while they schedule
    # The chart's helm-test RBAC grants exactly what this run asked of the API server.
    used = set()
    for method, path, _query in kube.requests:
        parts = path.strip("/").split("/")  # api v1 | apis group v1, [namespaces ns] plural [name [sub]]
        parts = parts[3:] if parts[0] == "apis" else parts[2:]
        scope = "cluster" if parts[0] != "namespaces" else "namespace"
        rest = parts if scope == "cluster" else parts[2:]
        resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        verb = {"POST": "create", "DELETE": "delete"}.get(method) or ("get" if len(rest) > 1 else "list")
        used.add((scope, resource, verb))
    docs = render({"tests": {"verify": {"enabled": True}}}, tmp=tmp_path)
    granted = {
        (scope, r, verb)
        for scope, kind in (("cluster", "ClusterRole"), ("namespace", "Role"))
        for rule in next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith("-verify"))["rules"]
        for r in rule["resources"]
        for verb in rule["verbs"]
    }
    # (events are read only for a probe that never finishes: the unschedulable test below)
    assert used | {("namespace", "events", "list")} == granted


def test_native_policies_are_checked_where_the_api_server_has_them(
    cert_dir: Path, server: Server, tmp_path: Path
) -> None:
    """On a 1.36 API server (admissionregistration.k8s.io/v1 served): the chart's policies and
    bindings as enforcement both renders them pass; a policy without its binding fails (it never
    runs), and so does a rule's binding whose action is not its mode's; no policy at all is
    reported, with the way to install it."""
    served = {"": ("v1",), "apps": ("v1",), "batch": ("v1",), "resource.k8s.io": ("v1",)}
    api = KubeApi(cert_dir, served={**served, "admissionregistration.k8s.io": ("v1",)}).start()
    try:
        api.put(node("gke-t4-pool-0", T4_LABELS, {GPU: "2"}, [GPU_TAINT]), device_plugin("gke-t4-pool-0"))
        api.admit = admission(server)
        cluster(api)
        docs = render({"enforcement": "both"}, kube_version="1.36.0", tmp=tmp_path)
        assert isinstance(docs, list)
        policy = next(d for d in docs if d["kind"] == "MutatingAdmissionPolicy")
        binding = next(d for d in docs if d["kind"] == "MutatingAdmissionPolicyBinding")
        twins = [r for r in ALL_RULES if r.native is not None and r.default_mode is not Mode.OFF]  # shipped: on
        modes = sorted({r.default_mode.value for r in twins if isinstance(r, Rule)})
        # The object rules' policies, one each (LimitRanges, claims; quota advice is off).
        objects = {f"gpu-policy-{r.id}" for r in twins if isinstance(r, ObjectRule)}

        def on_pods(kind: str) -> list[dict[str, Any]]:  # the Pods' policies, one per mode, and the objects'
            return [
                d
                for d in docs
                if d["kind"] == kind
                and (d["metadata"]["name"].endswith(("-deny", "-warn")) or d["metadata"]["name"] in objects)
            ]

        rules, rule_bindings = on_pods("ValidatingAdmissionPolicy"), on_pods("ValidatingAdmissionPolicyBinding")
        assert len(rules) == len(rule_bindings) == len(modes) + len(objects) == 4 and len(twins) >= 3

        def native() -> dict[str, dict[str, Any]]:
            r = verify(api, tmp_path, "-o", "json")
            assert isinstance(r, subprocess.CompletedProcess)
            assert r.stdout.startswith("{"), r.stdout + r.stderr
            found = checks(r)
            return {"isolation": found["native-isolation"], "rules": found["native-rules"]}

        found = native()
        assert found["isolation"]["status"] == "info" and "enforcement both" in found["isolation"]["fix"]
        assert found["rules"]["status"] == "info" and "enforcement both" in found["rules"]["fix"]
        api.put(policy, *rules)
        found = native()
        assert found["isolation"]["status"] == "fail" and found["rules"]["status"] == "fail"
        assert found["rules"]["summary"].count("has no binding, so it never runs") == len(rules)
        api.put(binding, *rule_bindings)
        found = native()
        assert found["isolation"]["status"] == "pass", found
        assert found["isolation"]["evidence"]["bindings"] == [binding["metadata"]["name"]]
        assert found["rules"]["status"] == "pass", found
        actions = {r.id: [r.default_mode.value.capitalize()] for r in twins}
        assert {rule: e["validationActions"] for rule, e in found["rules"]["evidence"].items()} == actions
        (deny,) = [b for b in rule_bindings if b["metadata"]["name"].endswith("-deny")]
        warned = copy.deepcopy(deny)
        warned["spec"]["validationActions"] = ["Warn"]
        api.put(warned)
        found = native()["rules"]
        assert found["status"] == "fail" and "is bound with ['Warn'], not [Deny] (its mode)" in found["summary"]
    finally:
        api.close()


def test_the_same_uuid_twice_fails_test_two_with_a_clear_message(kube: KubeApi, server: Server, tmp_path: Path) -> None:
    kube.admit = admission(server)
    cluster(kube, broken=True)
    r = verify(kube, tmp_path)
    assert isinstance(r, subprocess.CompletedProcess)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (
        "FAIL  isolation nvidia.com/gpu: two probes with 1 nvidia.com/gpu each, running together on gke-t4-pool-0, "
        "both see GPU-0f6c3f58" in r.stdout
    )
    assert "fix: two pods were given the same GPU" in r.stdout
    assert leftovers(kube) == []


def test_mig_devices_and_shared_slots(cert_dir: Path, server: Server, tmp_path: Path) -> None:
    kube = KubeApi(cert_dir).start()
    try:
        a30 = {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.6gb": "4", "nvidia.com/gpu.shared": "8"}
        kube.put(node("a30-0", {"accelerator": "nvidia-a30"}, a30), device_plugin("a30-0"))
        kube.admit = admission(server)
        cluster(kube)
        r = verify(kube, tmp_path, "-o", "json")
        assert isinstance(r, subprocess.CompletedProcess)
        found = checks(r)
        assert found["isolation nvidia.com/gpu.shared"]["status"] == "pass"  # distinct here
        mig = found["isolation nvidia.com/mig-1g.6gb"]
        assert mig["status"] == "pass" and all(u[0].startswith("MIG-") for u in mig["evidence"]["probes"].values())
        assert leftovers(kube) == []
        cluster(kube, broken=True)
        r = verify(kube, tmp_path, "-o", "json", "--resource", "nvidia.com/mig-1g.6gb")
        assert isinstance(r, subprocess.CompletedProcess)
        found = checks(r)
        assert found["isolation nvidia.com/mig-1g.6gb"]["status"] == "fail"
        assert found["isolation nvidia.com/gpu.shared"]["status"] == "info"  # slots may share a card
        assert "time-slicing hands out turns, not cards" in found["isolation nvidia.com/gpu.shared"]["summary"]
    finally:
        kube.close()


def test_an_amd_fleet_is_probed_by_its_render_nodes(cert_dir: Path, server: Server, tmp_path: Path) -> None:
    """Issue 36: `verify --resource amd.com/gpu` on MI300X nodes. AMD's device plugin mounts one
    /dev/dri/renderD<N> per GPU under the host's name and sets no variable: the probes count render
    nodes, two one-GPU probes see different ones, a probe without a request sees none."""
    kube = KubeApi(cert_dir).start()
    try:
        labels = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}
        plugin = device_plugin("mi300x-0")
        plugin["metadata"].update(name="amdgpu-device-plugin-daemonset-x1", namespace="kube-system")
        plugin["metadata"]["labels"] = {"name": "amdgpu-dp-ds"}  # k8s-ds-amdgpu-dp.yaml's
        plugin["spec"]["containers"][0].update(name="amdgpu-dp-cntr", image="rocm/k8s-device-plugin")
        kube.put(node("mi300x-0", labels, {"amd.com/gpu": "8"}), plugin)
        kube.admit = admission(server)
        cluster(kube)
        r = verify(kube, tmp_path, "-o", "json", "--resource", "amd.com/gpu")
        assert isinstance(r, subprocess.CompletedProcess)
        found = checks(r)
        assert found["device-plugin"]["status"] == "pass", found["device-plugin"]
        assert found["requests-enforced"]["status"] == "pass", found["requests-enforced"]
        assert found["requests-enforced"]["evidence"]["uuids"] == ["/dev/dri/renderD128"]
        iso = found["isolation amd.com/gpu"]
        assert iso["status"] == "pass", iso
        assert sorted(u for units in iso["evidence"]["probes"].values() for u in units) == [
            "/dev/dri/renderD128",
            "/dev/dri/renderD129",
        ]
        assert found["no-request-sees-none"]["status"] == "pass"
        assert found["no-request-sees-none"]["evidence"]["render"] == []
        assert leftovers(kube) == []
    finally:
        kube.close()


def test_an_unschedulable_probe_reports_the_schedulers_event_and_is_deleted_on_timeout(
    kube: KubeApi, server: Server, tmp_path: Path
) -> None:
    kube.admit = admission(server)
    cluster(
        kube,
        pending="0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "2 Insufficient nvidia.com/gpu.",
    )
    r = verify(kube, tmp_path, "--timeout", "3", "-o", "junit")
    assert isinstance(r, subprocess.CompletedProcess)
    assert r.returncode == 1
    suite = ET.fromstring(r.stdout)
    failures = {c.get("name"): c.find("failure") for c in suite.findall("testcase")}
    failure = failures["requests-enforced"]
    assert failure is not None and "did not finish within --timeout 3 s (Pending)" in (failure.get("message") or "")
    assert "2 Insufficient nvidia.com/gpu" in (failure.text or "")
    assert leftovers(kube) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_runs_delete_their_probes(
    kube: KubeApi, server: Server, tmp_path: Path, sig: signal.Signals
) -> None:
    kube.admit = admission(server)
    cluster(kube, pending="0/3 nodes are available: 2 Insufficient nvidia.com/gpu.")
    proc = verify(kube, tmp_path, wait=False)
    assert isinstance(proc, subprocess.Popen) and proc.stderr is not None
    # Interrupt it once it says a probe is created (its own progress line). Bounded by the run
    # itself (--timeout 20 per probe) and the test's timeout.
    said = []
    for line in proc.stderr:
        said.append(line)
        if ": created (" in line:
            break
    assert said and ": created (" in said[-1], "".join(said)
    assert kube.call(lambda: [k for k in kube.objects["pods"] if "verify" in k[1]])
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=30)
    err = "".join(said) + err
    assert proc.returncode == 130, err
    assert "cleaned up: 1 probe(s)" in err
    assert leftovers(kube) == []


def test_could_not_run_is_exit_2(cert_dir: Path, tmp_path: Path) -> None:
    kube = KubeApi(cert_dir).start()
    try:
        kube.put(node("cpu-0"))
        r = verify(kube, tmp_path)
        assert isinstance(r, subprocess.CompletedProcess)
        assert r.returncode == 2 and "no GPU nodes" in r.stderr
        kube.stop()
        r = verify(kube, tmp_path)
        assert isinstance(r, subprocess.CompletedProcess)
        assert r.returncode == 2 and "cannot reach the API server" in r.stderr
    finally:
        kube.close()


def test_a_missing_device_plugin_and_unhealthy_gpus_are_named(cert_dir: Path, server: Server, tmp_path: Path) -> None:
    kube = KubeApi(cert_dir).start()
    try:
        sick = node("gke-t4-pool-1", T4_LABELS, {GPU: "1"})
        sick["status"]["capacity"][GPU] = "2"  # one GPU fell off the bus: capacity 2, allocatable 1
        kube.put(
            node("gke-t4-pool-0", T4_LABELS, {GPU: "2"}),
            sick,
            node("t4-no-driver", T4_LABELS),
            device_plugin("gke-t4-pool-0"),
        )
        kube.admit = admission(server)
        cluster(kube)
        r = verify(kube, tmp_path, "-o", "json")
        assert isinstance(r, subprocess.CompletedProcess)
        assert r.returncode == 1
        found = checks(r)
        assert found["device-plugin"]["evidence"]["nodes"] == ["gke-t4-pool-1"]
        assert found["gpu-nodes"]["evidence"]["capacityNotAllocatable"] == {
            "gke-t4-pool-1": {"capacity": {GPU: 2}, "allocatable": {GPU: 1}}
        }
        assert found["gpu-nodes"]["evidence"]["labelledWithoutGpu"] == ["t4-no-driver"]
        assert leftovers(kube) == []
    finally:
        kube.close()


def verifier(kube: KubeApi, tmp_path: Path, **options: Any) -> Any:
    """The Verifier in this process, through the official client, polling fast (the stand-in's
    kubelet answers in `delay`)."""
    from kubernetes import config

    from webhook.cluster import probes, verify
    from webhook.config import default_policy

    client = config.new_client_from_config(config_file=str(kube.kubeconfig(tmp_path / "kubeconfig")))
    return verify.Verifier(
        probes.Kube(client), default_policy(), probes.Options(poll=0.02, timeout=20, **options), lambda _l: None
    )


def isolation(kube: KubeApi, tmp_path: Path, **options: Any) -> Any:
    """One isolation check of nvidia.com/gpu, as `verify` runs it (probes deleted after)."""
    from webhook.cluster.probes import gpu_resources

    v = verifier(kube, tmp_path, **options)
    nodes = {n["metadata"]["name"]: n for n in v.kube.nodes() if gpu_resources(n, v.policy)}
    with v.runner.cleanup():
        v.isolation(nodes)
    [check] = [c for c in v.runner.report.checks if c.name == "isolation nvidia.com/gpu"]
    return check


def test_sequential_probes_see_the_same_gpu_on_a_healthy_node(kube: KubeApi, tmp_path: Path) -> None:
    """Why the probes must hold their GPUs together: on a healthy node, a probe that has finished
    has freed its GPU, and the device plugin hands the next one the lowest free: the same."""
    cluster(kube, delay=0.02)
    v = verifier(kube, tmp_path)
    with v.runner.cleanup():
        first, second = v.runner.probe("a", "gke-t4-pool-0", GPU), v.runner.probe("b", "gke-t4-pool-0", GPU)
    assert first[0].units == second[0].units == ("GPU-0f6c3f58-4a8e-6a1c-2b9d-9c1e5d2f7a10",)


@pytest.mark.parametrize(("broken", "status"), [(False, "pass"), (True, "fail")], ids=["healthy", "broken-plugin"])
def test_isolation_holds_its_probes_together_twenty_runs(
    kube: KubeApi, tmp_path: Path, broken: bool, status: str
) -> None:
    """Twenty runs each: a healthy node always passes, a plugin that hands one GPU to two pods
    always fails, naming the node, each probe's devices and which probes shared."""
    model = cluster(kube, broken=broken, delay=0.02)
    for _ in range(20):
        check = isolation(kube, tmp_path)
        assert check.status == status, check
        assert check.evidence["node"] == "gke-t4-pool-0" and len(check.evidence["probes"]) == 2
        assert all(not held for held in model.held.values())  # every probe deleted, every GPU free
        assert leftovers(kube) == []
    if broken:
        a, b = sorted(check.evidence["probes"])
        assert check.evidence["shared"] == [[a, b, "GPU-0f6c3f58-4a8e-6a1c-2b9d-9c1e5d2f7a10"]]


def test_as_many_probes_as_asked_and_free(kube: KubeApi, tmp_path: Path) -> None:
    """--isolation-probes 3 on a node with 4 free GPUs: three at once, pairwise distinct; asking
    for 8 on it starts only the 4 it has free."""
    kube.put(node("a100-0", T4_LABELS, {GPU: "4"}, [GPU_TAINT]), device_plugin("a100-0"))
    cluster(kube, delay=0.02)
    check = isolation(kube, tmp_path, node="a100-0", isolation_probes=3)
    assert check.status == "pass" and check.summary.startswith("three probes with 1 nvidia.com/gpu each")
    assert len({tuple(u) for u in check.evidence["probes"].values()}) == 3
    check = isolation(kube, tmp_path, node="a100-0", isolation_probes=8)
    assert check.status == "pass" and len(check.evidence["probes"]) == 4


def test_one_free_gpu_is_could_not_check(kube: KubeApi, tmp_path: Path) -> None:
    """Neither a pass nor a fail: with one GPU of two in use, no second probe can hold another.
    Counted before any probe starts (a pod on the node holds one), and found while the probes
    run (a pod took one after the count: the second probe stays Pending, Insufficient)."""
    busy = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "ml"},
        "spec": {"nodeName": "gke-t4-pool-1", "containers": [{"name": "t", "resources": {"limits": {GPU: "1"}}}]},
        "status": {"phase": "Running"},
    }
    kube.put(busy)
    cluster(kube, delay=0.02)
    check = isolation(kube, tmp_path, node="gke-t4-pool-1")
    assert check.status == "skip" and check.summary == "only 1 free nvidia.com/gpu on node gke-t4-pool-1"
    model = cluster(kube, delay=0.02, taken={("gke-t4-pool-0", GPU): 1})
    check = isolation(kube, tmp_path, node="gke-t4-pool-0")
    assert check.status == "skip", check
    assert check.summary == (
        "could not check: only 1 free nvidia.com/gpu on node gke-t4-pool-0 while the other probes hold theirs"
    )
    assert leftovers(kube) == [] and model.held[("gke-t4-pool-0", GPU)] == {0: ("elsewhere", "pod-0")}
