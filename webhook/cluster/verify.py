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

import json
from collections.abc import Callable
from typing import Any

from ..policy import Policy
from ..policy.gpus import is_shared
from .client import ClusterError
from .probes import (
    FAIL,
    INFO,
    PASS,
    SKIP,
    WIRING_FIX,
    Check,
    Kube,
    Options,
    ProbeRunner,
    Report,
    count_text,
    gpu_resources,
    only_free,
    schedulable,
    status_message,
)


class Verifier:
    """The checks, in the order `run` makes them; the probes' lifecycle and the report are its
    ProbeRunner's."""

    def __init__(self, kube: Kube, policy: Policy, options: Options, progress: Callable[[str], None]) -> None:
        self.kube = kube
        self.policy = policy
        self.o = options
        self.runner = ProbeRunner(kube, policy, options, progress)

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
        with self.runner.cleanup():
            self.requests_enforced(gpu_nodes)
            self.isolation(gpu_nodes)
            self.webhook()
        self.native()
        self.native_rules()
        return self.runner.report

    def native(self) -> None:
        """enforcement both/native: isolation's MutatingAdmissionPolicy and its binding are there,
        and the API server type-checked its CEL without a warning (status.typeChecking)."""
        from kubernetes.client.exceptions import ApiException

        try:
            policies = self.kube.admission_policies("mutatingadmissionpolicies")
            bindings = self.kube.admission_policies("mutatingadmissionpolicybindings") or []
        except ApiException as exc:
            self.runner.add(
                "native-isolation", FAIL, f"cannot list MutatingAdmissionPolicies ({exc.status})", {}, _NATIVE_FIX
            )
            return
        if policies is None:
            self.runner.add(
                "native-isolation", SKIP, "this API server has no MutatingAdmissionPolicy v1 (before 1.36)", {}
            )
            return
        ours = [p for p in policies if p.get("metadata", {}).get("name", "").endswith("-isolate-non-gpu")]
        if not ours:
            self.runner.add(
                "native-isolation",
                INFO,
                "not installed: isolation is the mutating webhook's alone (enforcement webhook), so it lapses "
                "when no replica answers",
                {"policies": len(policies)},
                "install with enforcement both (the default on 1.36+) so the API server isolates pods itself",
            )
            return
        name = ours[0]["metadata"]["name"]
        bound = [b for b in bindings if (b.get("spec") or {}).get("policyName") == name]
        warnings = [
            w
            for check in ((ours[0].get("status") or {}).get("typeChecking") or {}).get("expressionWarnings") or []
            for w in [check.get("warning", "")]
        ]
        evidence = {"policy": name, "bindings": [b["metadata"]["name"] for b in bound], "typeChecking": warnings}
        if not bound:
            self.runner.add("native-isolation", FAIL, f"{name} has no binding, so it never runs", evidence, _NATIVE_FIX)
        elif warnings:
            self.runner.add(
                "native-isolation", FAIL, f"{name}: the API server's type check warns", evidence, _NATIVE_FIX
            )
        else:
            self.runner.add(
                "native-isolation", PASS, f"{name} is installed and bound: the API server isolates pods", evidence
            )

    def native_rules(self) -> None:
        """enforcement both/native: every rule with a CEL twin whose mode is not off has its
        ValidatingAdmissionPolicy, bound with its mode's action, type-checked without a warning."""
        from kubernetes.client.exceptions import ApiException

        from ..policy import ALL_RULES, Mode
        from ..policy.cel import ACTIONS

        expected = {
            r.id: ACTIONS[self.policy.mode(r.id)]
            for r in ALL_RULES
            if r.native is not None and self.policy.mode(r.id) is not Mode.OFF
        }
        if not expected:
            return
        try:
            policies = self.kube.admission_policies("validatingadmissionpolicies")
            bindings = self.kube.admission_policies("validatingadmissionpolicybindings") or []
        except ApiException as exc:
            self.runner.add(
                "native-rules", FAIL, f"cannot list ValidatingAdmissionPolicies ({exc.status})", {}, _NATIVE_FIX
            )
            return
        if policies is None:
            self.runner.add(
                "native-rules", SKIP, "this API server has no ValidatingAdmissionPolicy v1 (before 1.30)", {}
            )
            return
        # The chart's policies on Pods, one per mode: each lists its rules in an annotation.
        ours = {
            rule: p
            for p in policies
            if not _on_template(p)
            for rule in ((p.get("metadata") or {}).get("annotations") or {}).get(RULES_ANNOTATION, "").split(",")
            if rule in expected
        }
        if not ours:
            self.runner.add(
                "native-rules",
                INFO,
                "not installed: the rules are the validating webhook's alone (enforcement webhook)",
                {"rules": sorted(expected)},
                "install with enforcement both (the default on 1.36+) so the API server enforces them itself",
            )
            return
        problems: list[str] = []
        evidence: dict[str, Any] = {}
        for rule, action in sorted(expected.items()):
            policy = ours.get(rule)
            if policy is None:
                problems.append(f"{rule} has no ValidatingAdmissionPolicy")
                continue
            name = policy["metadata"]["name"]
            actions = sorted(
                a
                for b in bindings
                if (b.get("spec") or {}).get("policyName") == name
                for a in (b.get("spec") or {}).get("validationActions") or []
            )
            warnings = [
                check.get("warning", "")
                for check in ((policy.get("status") or {}).get("typeChecking") or {}).get("expressionWarnings") or []
            ]
            evidence[rule] = {"policy": name, "validationActions": actions, "typeChecking": warnings}
            if not actions:
                problems.append(f"{name} has no binding, so it never runs")
            elif action not in actions:
                problems.append(f"{name} is bound with {actions}, not [{action}] (its mode)")
            if warnings:
                problems.append(f"{name}: the API server's type check warns")
        if problems:  # a policy holds several rules: say each of its problems once
            self.runner.add("native-rules", FAIL, "; ".join(dict.fromkeys(problems)), evidence, _NATIVE_FIX)
        else:
            self.runner.add(
                "native-rules",
                PASS,
                f"{len(expected)} rules are installed and bound: the API server enforces them itself",
                evidence,
            )

    def device_plugin(self, nodes: list[dict[str, Any]], gpu_nodes: dict[str, dict[str, Any]]) -> None:
        running: dict[str, str] = {}
        for selector in self.o.device_plugin_selectors:
            for p in self.kube.pods(selector):
                node = (p.get("spec") or {}).get("nodeName")
                if node and (p.get("status") or {}).get("phase") == "Running":
                    running[node] = f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
        missing = sorted(n for n in gpu_nodes if n not in running)
        if missing:
            self.runner.add(
                "device-plugin",
                FAIL,
                f"no Running device-plugin pod on {len(missing)} of {len(gpu_nodes)} GPU node(s)",
                {"nodes": missing, "selectors": list(self.o.device_plugin_selectors)},
                "check the device plugin DaemonSet (its nodeSelector, tolerations, and its pods' logs); "
                "a plugin with other labels: --device-plugin-selector",
            )
        else:
            self.runner.add(
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
            self.runner.add(
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
            self.runner.add(
                "gpu-nodes",
                PASS,
                "every GPU node's capacity equals its allocatable; every GPU-labelled node advertises GPUs",
            )

    def _pick(self, gpu_nodes: dict[str, dict[str, Any]], resource: str, count: int) -> str | None:
        if self.o.node:
            n = gpu_nodes.get(self.o.node)
            return self.o.node if n is not None and gpu_resources(n, self.policy).get(resource, 0) >= count else None
        for name, n in sorted(gpu_nodes.items()):
            if schedulable(n) and gpu_resources(n, self.policy).get(resource, 0) >= count:
                return name
        return None

    def _probed(self, gpu_nodes: dict[str, dict[str, Any]]) -> set[str]:
        """The GPU resources the nodes offer that a probe may ask for: not a vendor's node-wide
        resource (Intel's gpu.intel.com/monitoring), which hands out every GPU by design."""
        wide = {r for v in self.policy.vendors for r in v.node_wide}
        return {
            r for n in gpu_nodes.values() for r, v in gpu_resources(n, self.policy).items() if v > 0 and r not in wide
        }

    def _main_resource(self, gpu_nodes: dict[str, dict[str, Any]]) -> str:
        if self.o.resource:
            return self.o.resource
        offered = self._probed(gpu_nodes)
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
            self.runner.add(
                "requests-enforced", SKIP, f"no schedulable node advertises {resource}", {"resource": resource}
            )
            return
        with_gpu = self.runner.probe("one", node, resource)
        if isinstance(with_gpu, Check):
            self.runner.add_check("requests-enforced", with_gpu)
            return
        seen, where = with_gpu
        evidence = {"node": where, "resource": resource, "devices": list(seen.devices), "uuids": list(seen.units)}
        if len(seen.units) == 1 or (not seen.smi and len(seen.devices) == 1):
            self.runner.add("requests-enforced", PASS, f"a probe with 1 {resource} sees exactly 1 device", evidence)
        else:
            self.runner.add(
                "requests-enforced",
                FAIL,
                f"a probe with 1 {resource} sees {len(seen.units) or len(seen.devices)} device(s)",
                evidence,
                "the device plugin must hand out exactly what is requested: check its config "
                "(time-slicing replicas, MIG strategy) and that the container runtime uses the NVIDIA runtime",
            )
        none = self.runner.probe("none", node, None)
        if isinstance(none, Check):
            self.runner.add_check("no-request-sees-none", none)
            return
        seen, where = none
        evidence = {
            "node": where,
            "devices": list(seen.devices),
            "uuids": list(seen.units),
            "nvidiaSmi": "present" if seen.smi else "absent",
            "NVIDIA_VISIBLE_DEVICES": seen.visible,
            "render": list(seen.render),
        }
        if seen.sees_none:
            self.runner.add("no-request-sees-none", PASS, "a probe without a GPU request sees no GPU", evidence)
        else:
            self.runner.add(
                "no-request-sees-none",
                FAIL,
                f"a probe without a GPU request sees {len(seen.units) or len(seen.devices)} GPU(s)",
                evidence,
                "the image's NVIDIA_VISIBLE_DEVICES=all reaches the runtime: turn on gpu-policy's isolateNonGpu "
                "(void for containers without a GPU), or set accept-nvidia-visible-devices-envvar-when-unprivileged "
                "= false in the NVIDIA container toolkit"
                if seen.devices or seen.gpus or seen.migs
                else "render nodes reach a container without a GPU request: the AMD Container Runtime read "
                "AMD_VISIBLE_DEVICES or DOCKER_RESOURCE_* (turn on vendors.amd.runtimeEnv and amd-runtime-envfrom, "
                "or take that runtime out of the node's CRI), or a hostPath or privileged default gives /dev/dri",
            )

    def isolation(self, gpu_nodes: dict[str, dict[str, Any]]) -> None:
        offered = self._probed(gpu_nodes)
        main = self._main_resource(gpu_nodes)
        wanted = [main]
        wanted += sorted(r for r in offered if r != main and r.startswith("nvidia.com/mig-"))[:1]
        wanted += sorted(r for r in offered if r != main and is_shared(r, self.policy))[:1]
        for resource in wanted:
            name = f"isolation {resource}"
            node = self._pick(gpu_nodes, resource, 2)
            if node is None:
                self.runner.add(
                    name, SKIP, f"no schedulable node has 2 {resource} to give two probes", {"resource": resource}
                )
                continue
            free = gpu_resources(gpu_nodes[node], self.policy).get(resource, 0) - self.runner.in_use(node, resource)
            if free < 2:
                self.runner.add(name, SKIP, only_free(free, resource, node), {"node": node, "resource": resource})
                continue
            self._isolation(name, node, resource, min(free, self.o.isolation_probes))

    def _isolation(self, name: str, node: str, resource: str, count: int) -> None:
        """`count` probes with 1 `resource` each, created together and each held Running after it
        reports, so no device is freed (and handed out again) before every probe has seen its own."""
        probes = [self.runner.create_probe(f"iso-{chr(ord('a') + i)}", node, resource, hold=True) for i in range(count)]
        try:
            refused = next((p for p in probes if isinstance(p, Check)), None)
            if refused is not None:
                self.runner.add_check(name, refused)
                return
            names = [p for p in probes if isinstance(p, str)]
            seen = self.runner.wait_all(names, node, resource)
        finally:
            self.runner.delete_probes([p for p in probes if isinstance(p, str)])
        if isinstance(seen, Check):
            self.runner.add_check(name, seen)
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
            self.runner.add(
                name, FAIL, f"probe {blind[0]} with 1 {resource} saw no device", evidence, "see requests-enforced"
            )
        elif not shared:
            self.runner.add(
                name,
                PASS,
                f"{count_text(count)} probes with 1 {resource} each, running together on {node}, see different devices",
                evidence,
            )
        elif is_shared(resource, self.policy):
            self.runner.add(
                name,
                INFO,
                f"{resource} slots are on the same card ({shared[0][2]}): time-slicing hands out turns, not cards",
                evidence,
            )
        else:
            pair = "two probes" if count == 2 else f"probes {shared[0][0]} and {shared[0][1]}"
            self.runner.add(
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
            body = self.runner.pod_body(f"dry-{name.rsplit('-', 1)[1]}", [container])
            try:
                self.kube.create_pod(self.o.namespace, body, dry_run=True)
            except ApiException as exc:
                message = status_message(exc)
                if exc.status == 403 and "GPU policy" in message:
                    self.runner.add(name, PASS, "denied by gpu-policy (server-side dry run)", {"message": message})
                else:
                    self.runner.add(
                        name, FAIL, f"refused, but not by gpu-policy ({exc.status})", {"message": message}, WIRING_FIX
                    )
                continue
            self.runner.add(name, FAIL, "a server-side dry run was admitted", {}, WIRING_FIX)
        plain = self.runner.pod_body("dry-plain", [{"name": "c", "image": self.o.image}])
        try:
            created = self.kube.create_pod(self.o.namespace, plain, dry_run=True)
        except ApiException as exc:
            self.runner.add(
                "webhook-voids-plain-pod",
                FAIL,
                f"a plain pod was refused ({exc.status})",
                {"message": status_message(exc)},
                WIRING_FIX,
            )
            return
        env = (created.get("spec") or {}).get("containers", [{}])[0].get("env") or []
        value = next((e.get("value") for e in env if e.get("name") == "NVIDIA_VISIBLE_DEVICES"), None)
        if value == "void":
            self.runner.add(
                "webhook-voids-plain-pod", PASS, "a plain pod gets NVIDIA_VISIBLE_DEVICES=void", {"env": env}
            )
        elif not self.policy.isolate_non_gpu:
            self.runner.add("webhook-voids-plain-pod", SKIP, "isolateNonGpu is off in this config", {})
        else:
            self.runner.add(
                "webhook-voids-plain-pod",
                FAIL,
                "a plain pod came back without NVIDIA_VISIBLE_DEVICES=void",
                {"env": env},
                "the mutating webhook is not called: check the MutatingWebhookConfiguration "
                "(webhook.mutating.enabled), its namespaceSelector and this namespace's labels",
            )


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
                lines.append(f"      {key}: {json.dumps(value) if not isinstance(value, str) else value}")
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
        body = escape(json.dumps(c.evidence, indent=2))
        if c.status == FAIL:
            out.append(f"    <failure message={quoteattr(c.summary)}>{body}\nfix: {escape(c.fix)}</failure>")
        elif c.status == SKIP:
            out.append(f"    <skipped message={quoteattr(c.summary)}/>")
        else:
            out.append(f"    <system-out>{escape(c.summary)}\n{body}</system-out>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"


_NATIVE_FIX = (
    "the chart renders the native policies and their bindings together: `helm upgrade` with the release's values "
    "(enforcement both or native) restores them, and `helm template ... --show-only templates/admissionpolicies.yaml` "
    "shows what they should be"
)

# The annotation of the chart's ValidatingAdmissionPolicies that lists the rules each one holds
# (templates/admissionpolicies.yaml: one policy per mode and root).
RULES_ANNOTATION = "gpu-policy.io/rules"


def _on_template(policy: dict[str, Any]) -> bool:
    """A template path's policy (its resources are the built-in controllers): verify checks the
    Pods' ones and the object rules' own (LimitRanges, quotas, claims), each rule once."""
    from ..policy.cel import ROOTS

    controllers = {plural for root in ROOTS[1:] for _group, plural in root.resources}
    rules = ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []
    return any(controllers & set(r.get("resources") or []) for r in rules)
