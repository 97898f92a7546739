"""The rest of a cluster for `gpu-policy verify`'s tests, played from recordings on top of the
stand-in API server (tests/kubeapi.py): the scheduler binds probe pods to nodes with free GPUs (or
leaves them Pending with its own event), the kubelet runs them, and their logs are real
`nvidia-smi -L` outputs (T4 cards, MIG devices, time-sliced slots), or a broken device plugin's.
"""

from __future__ import annotations

import json
from typing import Any

from tests.kubeapi import KubeApi

# Recorded `nvidia-smi -L` outputs (driver 550, as the CUDA base image prints them).
T4 = {
    0: "GPU 0: Tesla T4 (UUID: GPU-0f6c3f58-4a8e-6a1c-2b9d-9c1e5d2f7a10)",
    1: "GPU 0: Tesla T4 (UUID: GPU-7d2e91b4-0c35-11ef-8f2a-3b4c5d6e7f80)",
}


MIG = {
    0: "GPU 0: NVIDIA A30 (UUID: GPU-8c1b9a2e-55d0-4e7a-9a61-2c3d4e5f6a7b)\n"
    "  MIG 1g.6gb      Device  0: (UUID: MIG-5c2f8e1a-3b7d-5f0e-a4c9-1d2e3f4a5b6c)",
    1: "GPU 0: NVIDIA A30 (UUID: GPU-8c1b9a2e-55d0-4e7a-9a61-2c3d4e5f6a7b)\n"
    "  MIG 1g.6gb      Device  1: (UUID: MIG-9a8b7c6d-5e4f-5a3b-8c2d-1e0f9a8b7c6d)",
}


def log(visible: str, smi: str | None, devices: str = "", render: str = "") -> str:
    body = smi if smi is not None else "nvidia-smi: absent"
    return (
        f"gpu-policy-verify: begin\ndevices: {devices}\nrender: {render}\nNVIDIA_VISIBLE_DEVICES={visible}\n"
        f"{body}\ngpu-policy-verify: end\n"
    )


def device_plugin(node_name: str) -> dict[str, Any]:
    """A GPU operator device-plugin pod, Running on its node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"nvidia-device-plugin-daemonset-{abs(hash(node_name)) % 100000:05d}",
            "namespace": "gpu-operator",
            "labels": {"app": "nvidia-device-plugin-daemonset"},
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}],
        },
        "status": {"phase": "Running"},
    }


def smi(resource: str, index: int) -> str:
    """What `nvidia-smi -L` prints in a container given device `index` of `resource` (recorded
    lines for the first two; time-sliced slots are turns on the cards, slot i on card i % 2)."""
    if resource.startswith("nvidia.com/mig-"):
        a30 = MIG[0].splitlines()[0]
        made = f"{a30}\n  MIG 1g.6gb      Device {index:2d}: (UUID: MIG-{index:08x}-0000-5000-8000-0000)"
        return MIG.get(index, made)
    card = index % 2 if resource.endswith(".shared") else index
    return T4.get(card, f"GPU 0: Tesla T4 (UUID: GPU-{card:08x}-0000-4000-8000-000000000000)")


class Cluster:
    """The scheduler, device plugin and kubelet behind the recordings, as the real ones behave:
    - the scheduler binds a probe when its node has a free device of what it asks, else leaves it
      Pending with its FailedScheduling event (`Insufficient <resource>`);
    - the device plugin gives the lowest free device (NVIDIA's GetPreferredAllocation), or, when
      `broken`, device 0 to every pod, whoever holds it already;
    - the kubelet lists the plugin's NVIDIA_VISIBLE_DEVICES before the pod spec's in the
      container's environment (the last one wins), so a pod's own value overrides the plugin's;
    - a probe that sleeps after its report stays Running until it is deleted; any other finishes
      (Succeeded) `delay` seconds after it starts; a finished or deleted pod frees its devices.
    `pending` leaves every GPU probe Pending with that message; `taken` holds devices for pods the
    API server does not list (a pod that arrived after verify counted the node's free devices)."""

    def __init__(
        self,
        broken: bool = False,
        pending: str = "",
        taken: dict[tuple[str, str], int] | None = None,
        delay: float = 0.3,
    ) -> None:
        self.broken = broken
        self.pending = pending
        self.delay = delay
        # (node, resource) -> {device index: holder}
        self.held: dict[tuple[str, str], dict[int, tuple[str, str]]] = {}
        for (node_name, resource), n in (taken or {}).items():
            self.held[(node_name, resource)] = {i: ("elsewhere", f"pod-{i}") for i in range(n)}

    def _fail_scheduling(self, kube: KubeApi, ns: str, name: str, message: str) -> None:
        kube._put(  # on the stand-in's loop thread
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{name}.1", "namespace": ns},
                "involvedObject": {"kind": "Pod", "name": name, "namespace": ns},
                "reason": "FailedScheduling",
                "type": "Warning",
                "message": message,
            }
        )

    def __call__(self, kube: KubeApi, pod: dict[str, Any]) -> None:
        container = pod["spec"]["containers"][0]
        resource = next(iter(container.get("resources", {}).get("limits", {})), "")
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if self.pending and resource:
            self._fail_scheduling(kube, ns, name, self.pending)
            return
        node_name = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]["matchFields"][0]["values"][0]
        env = ["NVIDIA_VISIBLE_DEVICES=all"]  # the CUDA image's ENV
        held_index: int | None = None
        if resource:
            allocatable = int(kube.objects["nodes"][("", node_name)]["status"]["allocatable"].get(resource, "0"))
            held = self.held.setdefault((node_name, resource), {})
            free = [i for i in range(allocatable) if i not in held]
            if not free:
                self._fail_scheduling(
                    kube, ns, name, f"0/3 nodes are available: 1 Insufficient {resource}, 2 node(s) didn't match."
                )
                return
            device = 0 if self.broken else free[0]
            held[device] = (ns, name)
            held_index = device
            if not resource.startswith(("amd.com/", "gpu.intel.com/")):
                env.append(f"NVIDIA_VISIBLE_DEVICES={resource}#{device}")  # the device plugin's Allocate
        env += [f"{e['name']}={e.get('value', '')}" for e in container.get("env") or ()]  # the pod spec's
        visible = [e for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES=")][-1].split("=", 1)[1]
        node_allocatable = kube.objects["nodes"][("", node_name)]["status"]["allocatable"]
        if any(r.startswith(("amd.com/", "gpu.intel.com/")) for r in node_allocatable):
            # An AMD or Intel node: the plugin mounts the render node of the device it gives (under
            # the host's name) and sets no variable; no NVIDIA device, whatever the image says.
            render = f"/dev/dri/renderD{128 + held_index}" if held_index is not None else ""
            text = log(visible, None, "", render)
        elif visible == "void":
            text = log(visible, None)
        elif visible == "all":
            text = log(visible, T4[0] + "\n" + T4[1], "/dev/nvidia0 /dev/nvidia1")
        else:
            granted, _, index = visible.partition("#")
            text = log(f"{granted}-{index}", smi(granted, int(index)), "/dev/nvidia0")
        holds = "sleep" in container["command"][-1]

        def start() -> None:
            current = kube.objects["pods"].get((ns, name))
            if current is None:
                return  # deleted before it started
            kube.logs[(ns, name)] = text
            done = json.loads(json.dumps(current))
            done["spec"]["nodeName"] = node_name
            done["status"] = {"phase": "Running" if holds else "Succeeded"}
            kube._put(done)
            if not holds:
                self.free(kube, done)

        kube.loop.call_later(self.delay, start)

    def free(self, _kube: KubeApi, pod: dict[str, Any]) -> None:
        """The kubelet's teardown: whatever the pod held is free again (also `on_delete`)."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        for held in self.held.values():
            for device in [d for d, holder in held.items() if holder == key]:
                del held[device]


def cluster(kube: KubeApi, **kw: Any) -> Cluster:
    """A Cluster playing the scheduler and kubelet of `kube` (on create and on delete)."""
    model = Cluster(**kw)
    kube.on_create = model
    kube.on_delete = model.free
    return model
