"""`gpu-policy verify`: the guide's acceptance checklist, run against a live cluster.

Every platform team repeats the same checks after installing the device plugin, after each
driver or add-on upgrade, and when a tenant reports seeing someone else's GPU:
- the device plugin runs on every node that advertises GPUs, and the nodes agree with themselves;
- requests are enforced: a probe asking for 1 GPU sees exactly 1; a probe asking for none, from
  an image that bakes NVIDIA_VISIBLE_DEVICES=all, sees none;
- isolation: probes with 1 GPU each, holding their GPUs at the same time on one node, see
  pairwise different GPUs (MIG: different MIG devices; time-sliced `.shared` slots may share a
  card, which is reported, not failed). They must run together: a finished probe frees its GPU,
  and the device plugin hands the next one the lowest free device, the same one again;
- the webhook is wired: server-side dry runs of known-bad pods are denied with gpu-policy's
  message, and a plain pod comes back with NVIDIA_VISIBLE_DEVICES=void.

Probes report through their logs (no exec), carry a run label and an owner (a ConfigMap whose
deletion garbage-collects them), and are deleted on every path out: success, failure, timeout,
Ctrl-C. Everything goes through the official `kubernetes` client.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from ..policy import Policy
from ..policy.gpus import is_device, is_shared
from ..policy.quantity import QuantityError, parse_quantity
from .view import ClusterError, call_json

PASS, FAIL, SKIP, INFO = "pass", "fail", "skip", "info"
EXIT_OK, EXIT_FAILED, EXIT_CANNOT_RUN = 0, 1, 2
RUN_LABEL: Final = "gpu-policy.io/verify-run"
MANAGED: Final = {"app.kubernetes.io/managed-by": "gpu-policy-verify"}
DEFAULT_IMAGE: Final = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"  # bakes NVIDIA_VISIBLE_DEVICES=all
# The device plugin as each installer labels it: the GPU operator, NVIDIA's chart and static
# manifest, GKE's and AKS's managed plugins.
DEVICE_PLUGIN_SELECTORS: Final = (
    "app=nvidia-device-plugin-daemonset",
    "app.kubernetes.io/name=nvidia-device-plugin",
    "name=nvidia-device-plugin-ds",
    "k8s-app=nvidia-gpu-device-plugin",
    "k8s-app=nvidia-device-plugin-daemonset",
)
# What a probe prints: its device nodes, then nvidia-smi -L (or that it is absent), between markers.
PROBE_SCRIPT: Final = (
    'echo "gpu-policy-verify: begin"; '
    'echo "devices: $(ls /dev/nvidia[0-9]* 2>/dev/null | tr "\\n" " ")"; '
    'echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-<unset>}"; '
    "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L 2>&1; else echo 'nvidia-smi: absent'; fi; "
    'echo "gpu-policy-verify: end"'
)
_GPU_LINE = re.compile(r"^GPU \d+: .*\(UUID: (GPU-[0-9a-fA-F-]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG .*\(UUID: (MIG-[0-9a-zA-Z/-]+)\)")


@dataclass(slots=True)
class Check:
    name: str
    status: str
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""


@dataclass(frozen=True, slots=True)
class Seen:
    """What one probe's log says it saw."""

    devices: tuple[str, ...]  # /dev/nvidiaN nodes
    gpus: tuple[str, ...]  # GPU UUIDs from nvidia-smi -L
    migs: tuple[str, ...]  # MIG device UUIDs
    smi: bool  # nvidia-smi was present
    visible: str  # NVIDIA_VISIBLE_DEVICES in the container

    @property
    def units(self) -> tuple[str, ...]:
        """The devices the probe can use: MIG devices when there are any, else GPUs."""
        return self.migs or self.gpus

    @property
    def sees_none(self) -> bool:
        return not self.devices and not self.gpus and not self.migs


def parse_probe_log(text: str) -> Seen:
    """Reads a probe's log; raises ValueError when the probe did not get to its end marker."""
    if "gpu-policy-verify: end" not in text:
        raise ValueError("the probe's log is incomplete (no end marker)")
    devices: tuple[str, ...] = ()
    gpus: list[str] = []
    migs: list[str] = []
    visible = ""
    smi = True
    for line in text.splitlines():
        if line.startswith("devices:"):
            devices = tuple(d for d in line.split(":", 1)[1].split() if d)
        elif line.startswith("NVIDIA_VISIBLE_DEVICES="):
            visible = line.split("=", 1)[1]
        elif line.strip() == "nvidia-smi: absent":
            smi = False
        elif (m := _GPU_LINE.match(line)) is not None:
            gpus.append(m[1])
        elif (m := _MIG_LINE.match(line)) is not None:
            migs.append(m[1])
    return Seen(devices, tuple(gpus), tuple(migs), smi, visible)


# ---------------------------------------------------------------- the cluster, through the client


class Kube:
    """The few calls verify makes, as JSON, through the official client."""

    def __init__(self, api_client: Any, timeout: float = 30.0) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.timeout = timeout

    def _json(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return call_json(call, *args, timeout=self.timeout, **kwargs)

    def nodes(self) -> list[dict[str, Any]]:
        return list(self._json(self.core.list_node).get("items") or ())

    def pods(self, selector: str, namespace: str | None = None, fields: str = "") -> list[dict[str, Any]]:
        extra = {"field_selector": fields} if fields else {}
        if namespace:
            found = self._json(self.core.list_namespaced_pod, namespace, label_selector=selector, **extra)
        else:
            found = self._json(self.core.list_pod_for_all_namespaces, label_selector=selector, **extra)
        return list(found.get("items") or ())

    def create_pod(self, namespace: str, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        kwargs = {"dry_run": "All"} if dry_run else {}
        return dict(self._json(self.core.create_namespaced_pod, namespace, body, **kwargs))

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self._json(self.core.read_namespaced_pod, name, namespace))

    def delete_pod(self, namespace: str, name: str) -> None:
        self._json(self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0)

    def logs(self, namespace: str, name: str) -> str:
        response = self.core.read_namespaced_pod_log(
            name, namespace, _preload_content=False, _request_timeout=self.timeout
        )
        try:
            return bytes(response.data).decode("utf-8", errors="replace")
        finally:
            response.release_conn()

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        found = self._json(self.core.list_namespaced_event, namespace, field_selector=f"involvedObject.name={name}")
        return list(found.get("items") or ())

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._json(self.core.create_namespaced_config_map, namespace, body))

    def delete_config_map(self, namespace: str, name: str) -> None:
        self._json(self.core.delete_namespaced_config_map, name, namespace, propagation_policy="Foreground")


# ---------------------------------------------------------------- options and the run


@dataclass(frozen=True, slots=True)
class Options:
    namespace: str = "default"
    image: str = DEFAULT_IMAGE
    node: str | None = None
    resource: str | None = None
    timeout: float = 300.0
    keep: bool = False
    poll: float = 1.0
    isolation_probes: int = 2  # probes held together per isolation check (at most the node's free devices)
    device_plugin_selectors: tuple[str, ...] = DEVICE_PLUGIN_SELECTORS


@dataclass(slots=True)
class Report:
    checks: list[Check] = field(default_factory=list)
    run: str = ""
    cleaned: bool = False

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if any(c.status == FAIL for c in self.checks) else EXIT_OK


def _quantity(value: Any) -> int:
    try:
        return int(parse_quantity(value))
    except (QuantityError, ValueError):
        return 0


def gpu_resources(node: dict[str, Any], policy: Policy, side: str = "allocatable") -> dict[str, int]:
    values = (node.get("status") or {}).get(side) or {}
    return {k: _quantity(v) for k, v in values.items() if "/" in k and is_device(k, policy)}


def _schedulable(node: dict[str, Any]) -> bool:
    return not (node.get("spec") or {}).get("unschedulable")


class Verifier:
    def __init__(self, kube: Kube, policy: Policy, options: Options, progress: Callable[[str], None]) -> None:
        self.kube = kube
        self.policy = policy
        self.o = options
        self.progress = progress
        self.report = Report(run=secrets.token_hex(4))
        self.owner: dict[str, Any] | None = None
        self.probes: list[str] = []
        self.deadline = time.monotonic() + options.timeout

    # ------------------------------------------------------------ the checks

    def run(self) -> Report:
        nodes = self.kube.nodes()
        gpu_nodes = {
            n["metadata"]["name"]: n for n in nodes if any(v > 0 for v in gpu_resources(n, self.policy).values())
        }
        if not gpu_nodes:
            raise ClusterError(
                f"no GPU nodes: none of {len(nodes)} nodes advertises a GPU resource of the GPU model "
                "(gpuResourceName, gpuDeviceResources)"
            )
        self.device_plugin(nodes, gpu_nodes)
        with self.cleanup():
            self.requests_enforced(gpu_nodes)
            self.isolation(gpu_nodes)
            self.webhook()
        return self.report

    def device_plugin(self, nodes: list[dict[str, Any]], gpu_nodes: dict[str, dict[str, Any]]) -> None:
        running: dict[str, str] = {}
        for selector in self.o.device_plugin_selectors:
            for p in self.kube.pods(selector):
                node = (p.get("spec") or {}).get("nodeName")
                if node and (p.get("status") or {}).get("phase") == "Running":
                    running[node] = f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
        missing = sorted(n for n in gpu_nodes if n not in running)
        if missing:
            self._add(
                "device-plugin",
                FAIL,
                f"no Running device-plugin pod on {len(missing)} of {len(gpu_nodes)} GPU node(s)",
                {"nodes": missing, "selectors": list(self.o.device_plugin_selectors)},
                "check the device plugin DaemonSet (its nodeSelector, tolerations, and its pods' logs); "
                "a plugin with other labels: --device-plugin-selector",
            )
        else:
            self._add(
                "device-plugin",
                PASS,
                f"a device-plugin pod runs on each of the {len(gpu_nodes)} GPU node(s)",
                {"pods": dict(sorted(running.items()))},
            )
        disagree = {}
        for name, n in gpu_nodes.items():
            cap, alloc = gpu_resources(n, self.policy, "capacity"), gpu_resources(n, self.policy)
            if cap != alloc:
                disagree[name] = {"capacity": cap, "allocatable": alloc}
        labels = (self.policy.accelerator_label, *self.policy.gpu_node_labels)
        unlabelled = sorted(
            n["metadata"]["name"]
            for n in nodes
            if n["metadata"]["name"] not in gpu_nodes
            and any(k in ((n.get("metadata") or {}).get("labels") or {}) for k in labels)
        )
        if disagree or unlabelled:
            self._add(
                "gpu-nodes",
                FAIL,
                (f"{len(disagree)} node(s) with GPU capacity != allocatable (unhealthy GPUs)" if disagree else "")
                + ("; " if disagree and unlabelled else "")
                + (f"{len(unlabelled)} node(s) labelled as GPU nodes advertise no GPU" if unlabelled else ""),
                {"capacityNotAllocatable": disagree, "labelledWithoutGpu": unlabelled},
                "nvidia-smi on the node (Xid errors, a fallen-off GPU); the device plugin's log for unhealthy "
                "devices; for labelled nodes: the driver and the device plugin on that node",
            )
        else:
            self._add(
                "gpu-nodes",
                PASS,
                "every GPU node's capacity equals its allocatable; every GPU-labelled node advertises GPUs",
            )

    def _pick(self, gpu_nodes: dict[str, dict[str, Any]], resource: str, count: int) -> str | None:
        if self.o.node:
            n = gpu_nodes.get(self.o.node)
            return self.o.node if n is not None and gpu_resources(n, self.policy).get(resource, 0) >= count else None
        for name, n in sorted(gpu_nodes.items()):
            if _schedulable(n) and gpu_resources(n, self.policy).get(resource, 0) >= count:
                return name
        return None

    def _main_resource(self, gpu_nodes: dict[str, dict[str, Any]]) -> str:
        if self.o.resource:
            return self.o.resource
        offered = {r for n in gpu_nodes.values() for r, v in gpu_resources(n, self.policy).items() if v > 0}
        # whole GPUs first, then MIG devices, then anything else, time-sliced slots last
        return min(
            offered,
            key=lambda r: (
                r != self.policy.resource_name,
                not r.startswith("nvidia.com/mig-"),
                is_shared(r, self.policy),
                r,
            ),
        )

    def requests_enforced(self, gpu_nodes: dict[str, dict[str, Any]]) -> None:
        resource = self._main_resource(gpu_nodes)
        node = self._pick(gpu_nodes, resource, 1)
        if node is None:
            self._add("requests-enforced", SKIP, f"no schedulable node advertises {resource}", {"resource": resource})
            return
        with_gpu = self.probe("one", node, resource)
        if isinstance(with_gpu, Check):
            self._add_check("requests-enforced", with_gpu)
            return
        seen, where = with_gpu
        evidence = {"node": where, "resource": resource, "devices": list(seen.devices), "uuids": list(seen.units)}
        if len(seen.units) == 1 or (not seen.smi and len(seen.devices) == 1):
            self._add("requests-enforced", PASS, f"a probe with 1 {resource} sees exactly 1 device", evidence)
        else:
            self._add(
                "requests-enforced",
                FAIL,
                f"a probe with 1 {resource} sees {len(seen.units) or len(seen.devices)} device(s)",
                evidence,
                "the device plugin must hand out exactly what is requested: check its config "
                "(time-slicing replicas, MIG strategy) and that the container runtime uses the NVIDIA runtime",
            )
        none = self.probe("none", node, None)
        if isinstance(none, Check):
            self._add_check("no-request-sees-none", none)
            return
        seen, where = none
        evidence = {
            "node": where,
            "devices": list(seen.devices),
            "uuids": list(seen.units),
            "nvidiaSmi": "present" if seen.smi else "absent",
            "NVIDIA_VISIBLE_DEVICES": seen.visible,
        }
        if seen.sees_none:
            self._add("no-request-sees-none", PASS, "a probe without a GPU request sees no GPU", evidence)
        else:
            self._add(
                "no-request-sees-none",
                FAIL,
                f"a probe without a GPU request sees {len(seen.units) or len(seen.devices)} GPU(s)",
                evidence,
                "the image's NVIDIA_VISIBLE_DEVICES=all reaches the runtime: turn on gpu-policy's isolateNonGpu "
                "(void for containers without a GPU), or set accept-nvidia-visible-devices-envvar-when-unprivileged "
                "= false in the NVIDIA container toolkit",
            )

    def isolation(self, gpu_nodes: dict[str, dict[str, Any]]) -> None:
        offered = {r for n in gpu_nodes.values() for r, v in gpu_resources(n, self.policy).items() if v > 0}
        main = self._main_resource(gpu_nodes)
        wanted = [main]
        wanted += sorted(r for r in offered if r != main and r.startswith("nvidia.com/mig-"))[:1]
        wanted += sorted(r for r in offered if r != main and is_shared(r, self.policy))[:1]
        for resource in wanted:
            name = f"isolation {resource}"
            node = self._pick(gpu_nodes, resource, 2)
            if node is None:
                self._add(
                    name, SKIP, f"no schedulable node has 2 {resource} to give two probes", {"resource": resource}
                )
                continue
            free = gpu_resources(gpu_nodes[node], self.policy).get(resource, 0) - self._in_use(node, resource)
            if free < 2:
                self._add(name, SKIP, _only_free(free, resource, node), {"node": node, "resource": resource})
                continue
            self._isolation(name, node, resource, min(free, self.o.isolation_probes))

    def _in_use(self, node: str, resource: str) -> int:
        """How many `resource` the pods on `node` that still hold devices have asked for (as the
        scheduler counts: a pod's containers summed, or its largest init container if more)."""
        used = 0
        for pod in self.kube.pods("", fields=f"spec.nodeName={node}"):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            spec = pod.get("spec") or {}
            regular = sum(_asked(c, resource) for c in spec.get("containers") or ())
            init = max((_asked(c, resource) for c in spec.get("initContainers") or ()), default=0)
            used += max(regular, init)
        return used

    def _isolation(self, name: str, node: str, resource: str, count: int) -> None:
        """`count` probes with 1 `resource` each, created together and each held Running after it
        reports, so no device is freed (and handed out again) before every probe has seen its own."""
        probes = [self._create_probe(f"iso-{chr(ord('a') + i)}", node, resource, hold=True) for i in range(count)]
        try:
            refused = next((p for p in probes if isinstance(p, Check)), None)
            if refused is not None:
                self._add_check(name, refused)
                return
            names = [p for p in probes if isinstance(p, str)]
            seen = self._wait_all(names, node, resource)
        finally:
            self._delete_probes([p for p in probes if isinstance(p, str)])
        if isinstance(seen, Check):
            self._add_check(name, seen)
            return
        units = {probe: list(found.units) for probe, found in seen.items()}
        shared = [
            [a, b, unit]
            for i, a in enumerate(names)
            for b in names[i + 1 :]
            for unit in sorted(set(units[a]) & set(units[b]))
        ]
        evidence: dict[str, Any] = {"node": node, "resource": resource, "probes": units, "shared": shared}
        if not all(units.values()):
            blind = [p for p, u in units.items() if not u]
            self._add(
                name, FAIL, f"probe {blind[0]} with 1 {resource} saw no device", evidence, "see requests-enforced"
            )
        elif not shared:
            self._add(
                name,
                PASS,
                f"{_count(count)} probes with 1 {resource} each, running together on {node}, see different devices",
                evidence,
            )
        elif is_shared(resource, self.policy):
            self._add(
                name,
                INFO,
                f"{resource} slots are on the same card ({shared[0][2]}): time-slicing hands out turns, not cards",
                evidence,
            )
        else:
            pair = "two probes" if count == 2 else f"probes {shared[0][0]} and {shared[0][1]}"
            self._add(
                name,
                FAIL,
                f"{pair} with 1 {resource} each, running together on {node}, both see {shared[0][2]}",
                evidence,
                (
                    "two pods were given the same MIG device: check the MIG strategy (mixed: nvidia.com/mig-*) "
                    "and the device plugin's and MIG manager's config on that node"
                )
                if resource.startswith("nvidia.com/mig-")
                else "two pods were given the same GPU: time-slicing (or MPS) configured without renaming the "
                "resource (renameByDefault: true makes them nvidia.com/gpu.shared), or a pod sets "
                "NVIDIA_VISIBLE_DEVICES itself; check the device plugin's config",
            )

    def _wait_all(self, names: list[str], node: str, resource: str) -> dict[str, Seen] | Check:
        """Each held probe's report, once it is Running (or done) and its log complete; a Check
        when one cannot run: could not check (no device free for it), failed, or out of time."""
        seen: dict[str, Seen] = {}
        phases: dict[str, str] = {}
        while time.monotonic() < self.deadline:
            for name in names:
                if name in seen:
                    continue
                pod = self.kube.get_pod(self.o.namespace, name)
                phase = (pod.get("status") or {}).get("phase", "Pending")
                if phase != phases.get(name):
                    self.progress(f"probe {name}: {phase}")
                    phases[name] = phase
                if phase == "Pending":
                    if _insufficient(self.kube.events(self.o.namespace, name), resource):
                        held = len(names) - 1
                        return Check(
                            "",
                            SKIP,
                            f"could not check: {_only_free(held, resource, node)} while the other probes hold theirs",
                            {"node": node, "resource": resource, "pending": name},
                        )
                    continue
                log = self.kube.logs(self.o.namespace, name)
                if "gpu-policy-verify: end" in log:
                    seen[name] = parse_probe_log(log)
                elif phase in ("Succeeded", "Failed"):
                    return Check("", FAIL, f"probe {name} {phase.lower()}: its log is incomplete", {"log": log[-2000:]})
            if len(seen) == len(names):
                return seen
            time.sleep(self.o.poll)
        waiting = [n for n in names if n not in seen]
        return Check(
            "",
            FAIL,
            f"probe {waiting[0]} did not report within --timeout {self.o.timeout:g} s "
            f"({phases.get(waiting[0], 'Pending')})",
            {"node": node, "resource": resource, "waiting": waiting},
            _PENDING_FIX,
        )

    def webhook(self) -> None:
        gpu = self.policy.resource_name
        bad: dict[str, dict[str, Any]] = {
            "webhook-denies-visible-devices": {
                "name": "c",
                "image": self.o.image,
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
            },
            "webhook-denies-privileged": {
                "name": "c",
                "image": self.o.image,
                "securityContext": {"privileged": True},
                "resources": {"limits": {gpu: "1"}},
            },
        }
        from kubernetes.client.exceptions import ApiException

        for name, container in bad.items():
            body = self._pod_body(f"dry-{name.rsplit('-', 1)[1]}", [container])
            try:
                self.kube.create_pod(self.o.namespace, body, dry_run=True)
            except ApiException as exc:
                message = _status_message(exc)
                if exc.status == 403 and "GPU policy" in message:
                    self._add(name, PASS, "denied by gpu-policy (server-side dry run)", {"message": message})
                else:
                    self._add(
                        name, FAIL, f"refused, but not by gpu-policy ({exc.status})", {"message": message}, _WIRING
                    )
                continue
            self._add(name, FAIL, "a server-side dry run was admitted", {}, _WIRING)
        plain = self._pod_body("dry-plain", [{"name": "c", "image": self.o.image}])
        try:
            created = self.kube.create_pod(self.o.namespace, plain, dry_run=True)
        except ApiException as exc:
            self._add(
                "webhook-voids-plain-pod",
                FAIL,
                f"a plain pod was refused ({exc.status})",
                {"message": _status_message(exc)},
                _WIRING,
            )
            return
        env = (created.get("spec") or {}).get("containers", [{}])[0].get("env") or []
        value = next((e.get("value") for e in env if e.get("name") == "NVIDIA_VISIBLE_DEVICES"), None)
        if value == "void":
            self._add("webhook-voids-plain-pod", PASS, "a plain pod gets NVIDIA_VISIBLE_DEVICES=void", {"env": env})
        elif not self.policy.isolate_non_gpu:
            self._add("webhook-voids-plain-pod", SKIP, "isolateNonGpu is off in this config", {})
        else:
            self._add(
                "webhook-voids-plain-pod",
                FAIL,
                "a plain pod came back without NVIDIA_VISIBLE_DEVICES=void",
                {"env": env},
                "the mutating webhook is not called: check the MutatingWebhookConfiguration "
                "(webhook.mutating.enabled), its namespaceSelector and this namespace's labels",
            )

    # ------------------------------------------------------------ probes

    def _pod_body(self, suffix: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": f"gpu-policy-verify-{self.report.run}-{suffix}",
            "namespace": self.o.namespace,
            "labels": {**MANAGED, RUN_LABEL: self.report.run},
        }
        if self.owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": self.owner["metadata"]["name"],
                    "uid": self.owner["metadata"]["uid"],
                    "blockOwnerDeletion": False,
                }
            ]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers, **spec}}

    def _create_probe(self, suffix: str, node: str, resource: str | None, hold: bool = False) -> str | Check:
        """Creates one probe pod on `node` (through the scheduler); its name, or a failed Check.
        A held probe stays Running after its report (for at most the rest of the run)."""
        script = PROBE_SCRIPT
        if hold:
            script += f"; sleep {max(1, int(self.deadline - time.monotonic()) + 1)}"
        container: dict[str, Any] = {
            "name": "probe",
            "image": self.o.image,
            "command": ["sh", "-c", script],
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "runAsNonRoot": True,
                "runAsUser": 65532,
            },
        }
        if resource is not None:
            container["resources"] = {"limits": {resource: "1"}}
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            # Through the scheduler (not nodeName), so "Insufficient" shows as its own event.
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    }
                }
            },
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
        }
        if hold:  # should verify itself die, the kubelet still ends the probe and frees its GPU
            spec["activeDeadlineSeconds"] = max(1, int(self.o.timeout))
        body = self._pod_body(f"{len(self.probes) + 1}-{suffix}", [container], **spec)
        name = str(body["metadata"]["name"])
        from kubernetes.client.exceptions import ApiException

        try:
            self.kube.create_pod(self.o.namespace, body)
        except ApiException as exc:
            return Check(
                "",
                FAIL,
                f"probe {name} was refused ({exc.status}): {_status_message(exc)}",
                {"node": node, "resource": resource},
                "a webhook, quota or Pod Security level refused the probe: run verify in a namespace that allows it "
                "(-n), or with an image that runs as non-root (--image)",
            )
        self.probes.append(name)
        self.progress(f"probe {name}: created ({resource or 'no GPU'} on {node})")
        return name

    def _delete_probes(self, names: list[str]) -> None:
        from kubernetes.client.exceptions import ApiException

        if self.o.keep:
            return
        for name in names:
            with suppress(ApiException, ClusterError):  # what is left goes with the owner at the end
                self.kube.delete_pod(self.o.namespace, name)

    def probe(self, suffix: str, node: str, resource: str | None) -> tuple[Seen, str] | Check:
        """Runs one probe on `node` to completion; (what it saw, its node) or a failed Check."""
        created = self._create_probe(suffix, node, resource)
        if isinstance(created, Check):
            return created
        name = created
        last = ""
        while time.monotonic() < self.deadline:
            pod = self.kube.get_pod(self.o.namespace, name)
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if phase != last:
                self.progress(f"probe {name}: {phase}")
                last = phase
            if phase in ("Succeeded", "Failed"):
                log = self.kube.logs(self.o.namespace, name)
                try:
                    return parse_probe_log(log), (pod.get("spec") or {}).get("nodeName") or node
                except ValueError as exc:
                    return Check("", FAIL, f"probe {name} {phase.lower()}: {exc}", {"log": log[-2000:]}, _IMAGE_FIX)
            time.sleep(self.o.poll)
        events = self.kube.events(self.o.namespace, name)
        reasons = [f"{e.get('reason')}: {e.get('message')}" for e in events if e.get("type") == "Warning"]
        return Check(
            "",
            FAIL,
            f"probe {name} did not finish within --timeout {self.o.timeout:g} s ({last or 'Pending'})",
            {"node": node, "resource": resource, "events": reasons},
            _PENDING_FIX,
        )

    @contextmanager
    def cleanup(self) -> Iterator[None]:
        """Creates the owner; deletes every probe and the owner on the way out, whatever the way."""
        owner = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"gpu-policy-verify-{self.report.run}",
                "namespace": self.o.namespace,
                "labels": {**MANAGED, RUN_LABEL: self.report.run},
            },
            "data": {"purpose": "owner of gpu-policy verify's probes: deleting it deletes them"},
        }
        self.owner = self.kube.create_config_map(self.o.namespace, owner)
        try:
            yield
        finally:
            if not self.o.keep:
                self._delete_all()

    def _delete_all(self) -> None:
        from kubernetes.client.exceptions import ApiException

        names = set(self.probes)
        with suppress(ApiException, ClusterError):  # whatever is left is found by its label next
            names |= {p["metadata"]["name"] for p in self.kube.pods(f"{RUN_LABEL}={self.report.run}", self.o.namespace)}
        for name in sorted(names):
            with suppress(ApiException, ClusterError):
                self.kube.delete_pod(self.o.namespace, name)
        with suppress(ApiException, ClusterError):  # the owner: its deletion also collects the probes
            self.kube.delete_config_map(self.o.namespace, f"gpu-policy-verify-{self.report.run}")
        self.report.cleaned = True
        self.progress(f"cleaned up: {len(names)} probe(s) and their owner deleted")

    # ------------------------------------------------------------ results

    def _add(self, name: str, status: str, summary: str, evidence: dict[str, Any] | None = None, fix: str = "") -> None:
        self.report.checks.append(Check(name, status, summary, evidence or {}, fix))
        self.progress(f"{status.upper():4} {name}: {summary}")

    def _add_check(self, name: str, check: Check) -> None:
        self._add(name, check.status, check.summary, check.evidence, check.fix)


_WIRING = (
    "the validating webhook is not called for this namespace: check the ValidatingWebhookConfiguration "
    "(failurePolicy, namespaceSelector: this namespace may be excluded), its caBundle, and the Service's endpoints"
)
_IMAGE_FIX = "the probe image must have sh and ls (--image); its log is in the evidence"
_PENDING_FIX = (
    "the scheduler's event says why (e.g. Insufficient nvidia.com/gpu: the GPUs are in use); "
    "an image pull that hangs: --image"
)


def _asked(container: dict[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get(resource, (resources.get("requests") or {}).get(resource, 0))
    return _quantity(value)


def _insufficient(events: list[dict[str, Any]], resource: str) -> bool:
    """The scheduler said the node has too few `resource` for the probe."""
    return any(
        e.get("reason") == "FailedScheduling" and f"Insufficient {resource}" in str(e.get("message")) for e in events
    )


def _only_free(free: int, resource: str, node: str) -> str:
    return f"only {max(free, 0)} free {resource} on node {node}"


def _count(n: int) -> str:
    return {2: "two", 3: "three", 4: "four"}.get(n, str(n))


def _status_message(exc: Any) -> str:
    try:
        return str(orjson.loads(exc.body).get("message") or exc.reason)
    except (orjson.JSONDecodeError, TypeError, AttributeError):
        return str(exc.reason)


# ---------------------------------------------------------------- output


def to_dict(report: Report) -> dict[str, Any]:
    return {
        "run": report.run,
        "exitCode": report.exit_code,
        "cleanedUp": report.cleaned,
        "checks": [
            {"name": c.name, "status": c.status, "summary": c.summary, "evidence": c.evidence, "fix": c.fix}
            for c in report.checks
        ],
    }


def to_text(report: Report) -> str:
    lines = []
    for c in report.checks:
        lines.append(f"{c.status.upper():4}  {c.name}: {c.summary}")
        for key, value in c.evidence.items():
            if value not in ({}, [], "", None):
                lines.append(f"      {key}: {orjson.dumps(value).decode() if not isinstance(value, str) else value}")
        if c.fix and c.status == FAIL:
            lines.append(f"      fix: {c.fix}")
    counts = {s: sum(1 for c in report.checks if c.status == s) for s in (PASS, FAIL, SKIP, INFO)}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" (run {report.run})")
    return "\n".join(lines) + "\n"


def to_junit(report: Report) -> str:
    from xml.sax.saxutils import escape, quoteattr

    failures = sum(1 for c in report.checks if c.status == FAIL)
    skipped = sum(1 for c in report.checks if c.status == SKIP)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name="gpu-policy verify" tests="{len(report.checks)}" failures="{failures}" skipped="{skipped}">',
    ]
    for c in report.checks:
        out.append(f'  <testcase classname="gpu-policy.verify" name={quoteattr(c.name)}>')
        body = escape(orjson.dumps(c.evidence, option=orjson.OPT_INDENT_2).decode())
        if c.status == FAIL:
            out.append(f"    <failure message={quoteattr(c.summary)}>{body}\nfix: {escape(c.fix)}</failure>")
        elif c.status == SKIP:
            out.append(f"    <skipped message={quoteattr(c.summary)}/>")
        else:
            out.append(f"    <system-out>{escape(c.summary)}\n{body}</system-out>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"
