"""Probe pods for `gpu-policy verify` (webhook.cluster.verify has the checks): the API calls they
need (Kube), their lifecycle (ProbeRunner: created owned by the run's ConfigMap and labelled,
read through their logs, deleted on every path out), what a probe's log says (parse_probe_log), and
the report in text, JSON and JUnit.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Final

from ..admission.review import loads
from ..policy import Policy
from ..policy.gpus import is_device
from ..policy.quantity import QuantityError, parse_quantity
from .client import ClusterError, call_json

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
    # AMD's published DaemonSet (k8s-ds-amdgpu-dp.yaml) and its GPU operator's; Intel's GPU plugin.
    "name=amdgpu-dp-ds",
    "app.kubernetes.io/name=amd-gpu-device-plugin",
    "app=intel-gpu-plugin",
)


# What a probe prints: its NVIDIA device nodes, its DRM render nodes (AMD's and Intel's device plugins
# mount one /dev/dri/renderD<N> per GPU, under the host's name, and no variable: the render nodes are
# the devices an AMD or Intel probe counts), then nvidia-smi -L (or that it is absent), between markers.
PROBE_SCRIPT: Final = (
    'echo "gpu-policy-verify: begin"; '
    'echo "devices: $(ls /dev/nvidia[0-9]* 2>/dev/null | tr "\\n" " ")"; '
    'echo "render: $(ls /dev/dri/renderD* 2>/dev/null | tr "\\n" " ")"; '
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
    render: tuple[str, ...] = ()  # /dev/dri/renderD<N> nodes (AMD, Intel)

    @property
    def units(self) -> tuple[str, ...]:
        """The devices the probe can use: MIG devices when there are any, else GPUs, else (AMD,
        Intel: no nvidia-smi lines) render nodes."""
        return self.migs or self.gpus or self.render

    @property
    def sees_none(self) -> bool:
        return not self.devices and not self.gpus and not self.migs and not self.render


def parse_probe_log(text: str) -> Seen:
    """Reads a probe's log; raises ValueError when the probe did not get to its end marker."""
    if "gpu-policy-verify: end" not in text:
        raise ValueError("the probe's log is incomplete (no end marker)")
    devices: tuple[str, ...] = ()
    render: tuple[str, ...] = ()
    gpus: list[str] = []
    migs: list[str] = []
    visible = ""
    smi = True
    for line in text.splitlines():
        if line.startswith("devices:"):
            devices = tuple(d for d in line.split(":", 1)[1].split() if d)
        elif line.startswith("render:"):
            render = tuple(d for d in line.split(":", 1)[1].split() if d)
        elif line.startswith("NVIDIA_VISIBLE_DEVICES="):
            visible = line.split("=", 1)[1]
        elif line.strip() == "nvidia-smi: absent":
            smi = False
        elif (m := _GPU_LINE.match(line)) is not None:
            gpus.append(m[1])
        elif (m := _MIG_LINE.match(line)) is not None:
            migs.append(m[1])
    return Seen(devices, tuple(gpus), tuple(migs), smi, visible, render)


class Kube:
    """The few calls verify makes, as JSON, through the official client."""

    def __init__(self, api_client: Any, timeout: float = 30.0) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.api_client = api_client
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

    def admission_policies(self, plural: str) -> list[dict[str, Any]] | None:
        """admissionregistration.k8s.io/v1 `plural` (mutatingadmissionpolicies, ...bindings), or
        None where the API server serves no such resource (before 1.36). The client has no typed
        API for them yet, so the path is asked as it is."""
        from kubernetes.client.exceptions import ApiException

        path = f"/apis/admissionregistration.k8s.io/v1/{plural}"
        try:
            found = self._json(
                self.api_client.call_api,
                path,
                "GET",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return list(found.get("items") or ())

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._json(self.core.create_namespaced_config_map, namespace, body))

    def delete_config_map(self, namespace: str, name: str) -> None:
        self._json(self.core.delete_namespaced_config_map, name, namespace, propagation_policy="Foreground")


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


def schedulable(node: dict[str, Any]) -> bool:
    return not (node.get("spec") or {}).get("unschedulable")


class ProbeRunner:
    """Probe pods on a live cluster: create them (owned by the run's ConfigMap, labelled), wait
    for their logs, delete them on every path out; and the report the checks add to. The checks
    (webhook.cluster.verify.Verifier) hold one and call it."""

    def __init__(self, kube: Kube, policy: Policy, options: Options, progress: Callable[[str], None]) -> None:
        self.kube = kube
        self.policy = policy
        self.o = options
        self.progress = progress
        self.report = Report(run=secrets.token_hex(4))
        self.owner: dict[str, Any] | None = None
        self.probes: list[str] = []
        self.deadline = time.monotonic() + options.timeout

    def in_use(self, node: str, resource: str) -> int:
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

    def wait_all(self, names: list[str], node: str, resource: str) -> dict[str, Seen] | Check:
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
                            f"could not check: {only_free(held, resource, node)} while the other probes hold theirs",
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

    def pod_body(self, suffix: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
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

    def create_probe(self, suffix: str, node: str, resource: str | None, hold: bool = False) -> str | Check:
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
        body = self.pod_body(f"{len(self.probes) + 1}-{suffix}", [container], **spec)
        name = str(body["metadata"]["name"])
        from kubernetes.client.exceptions import ApiException

        try:
            self.kube.create_pod(self.o.namespace, body)
        except ApiException as exc:
            return Check(
                "",
                FAIL,
                f"probe {name} was refused ({exc.status}): {status_message(exc)}",
                {"node": node, "resource": resource},
                "a webhook, quota or Pod Security level refused the probe: run verify in a namespace that allows it "
                "(-n), or with an image that runs as non-root (--image)",
            )
        self.probes.append(name)
        self.progress(f"probe {name}: created ({resource or 'no GPU'} on {node})")
        return name

    def delete_probes(self, names: list[str]) -> None:
        from kubernetes.client.exceptions import ApiException

        if self.o.keep:
            return
        for name in names:
            with suppress(ApiException, ClusterError):  # what is left goes with the owner at the end
                self.kube.delete_pod(self.o.namespace, name)

    def probe(self, suffix: str, node: str, resource: str | None) -> tuple[Seen, str] | Check:
        """Runs one probe on `node` to completion; (what it saw, its node) or a failed Check."""
        created = self.create_probe(suffix, node, resource)
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

    def add(self, name: str, status: str, summary: str, evidence: dict[str, Any] | None = None, fix: str = "") -> None:
        self.report.checks.append(Check(name, status, summary, evidence or {}, fix))
        self.progress(f"{status.upper():4} {name}: {summary}")

    def add_check(self, name: str, check: Check) -> None:
        self.add(name, check.status, check.summary, check.evidence, check.fix)


WIRING_FIX = (
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


def only_free(free: int, resource: str, node: str) -> str:
    return f"only {max(free, 0)} free {resource} on node {node}"


def count_text(n: int) -> str:
    return {2: "two", 3: "three", 4: "four"}.get(n, str(n))


def status_message(exc: Any) -> str:
    try:
        return str(loads(exc.body).get("message") or exc.reason)
    except (ValueError, TypeError, AttributeError):  # a JSON decode error (json's, orjson's) is a ValueError
        return str(exc.reason)
