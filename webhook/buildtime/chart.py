"""The chart's generated template (charts/gpu-policy/templates/_generated.tpl): the matchConditions
CEL of the pods and mutating webhooks, derived from every rule's and mutation's triggers, the
rules of the workloads webhook, and whether the server watches namespaces (Rule.watches_namespaces).
tests/test_match_conditions.py proves the CEL sends every pod the policy acts on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class Clause:
    """One CEL test, over a container `c` (per_container) or over the Pod `object`."""

    cel: str  # a Go printf format: %s is the trigger's value
    per_container: bool
    value: str  # Helm expression for %s, or "" when the trigger has no value


def clause(trigger: Any) -> Clause:
    """How the chart's CEL spells a trigger."""
    from ..policy import Where, cel
    from ..policy.gpus import INSTANCE_TYPE

    value = f"$p.{trigger.setting}" if trigger.setting else (json.dumps(trigger.text) if trigger.text else "")
    where = trigger.where
    if where is Where.EVERY_POD:
        return Clause("true", False, "")
    if where is Where.CONTAINER_RESOURCE:
        return Clause(
            "(has(c.resources) && ((has(c.resources.limits) && '%s' in c.resources.limits) || "
            "(has(c.resources.requests) && '%s' in c.resources.requests)))",
            True,
            value,
        )
    if where is Where.GPU_RESOURCE:
        # The GPU model's own names and patterns (one "*": prefix and suffix), as the twins match
        # them: a NIC's rdma/ or SR-IOV resource is no reason to reach a fail-closed webhook.
        named = cel.named("k", "(@devices@ + @companions@)")
        return Clause(
            f"(has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, {named})) || "
            f"(has(c.resources.requests) && c.resources.requests.exists(k, {named}))))",
            True,
            "",
        )
    if where is Where.CONTAINER_IMAGE:
        # A list setting: its JSON is a CEL list literal.
        return Clause("(has(c.image) && %s.exists(p, c.image.startsWith(p)))", True, f"(toJson {value})")
    if where is Where.GPU_COUNT:
        return Clause("false", False, "")  # custom resources only; the chart's CEL sees pods
    if where is Where.RESOURCE_CLAIMS:
        return Clause("has(object.spec.resourceClaims)", False, "")
    if where is Where.CONTAINER_ENV:
        return Clause("(has(c.env) && c.env.exists(e, e.name == '%s'))", True, value)
    if where is Where.GRANTING_ENV or where is Where.GRANTING_ENV_PREFIX:
        from ..policy.vendors import NVIDIA, VENDORS, granting

        # NVIDIA's IMEX and MIG variables are parsed as its device list (webhook.policy.nvidia).
        vendor = granting(trigger.text, VENDORS) or NVIDIA
        literals = ", ".join(f"'{v}'" for v in sorted(vendor.no_devices))
        test = "e.name == '%s'" if where is Where.GRANTING_ENV else "e.name.startsWith('%s')"
        return Clause(
            f"(has(c.env) && c.env.exists(e, {test} && (has(e.valueFrom) || "
            f"(has(e.value) && !(e.value in [{literals}])))))",
            True,
            value,
        )
    if where is Where.ENV_FROM:
        return Clause("has(c.envFrom)", True, "")
    if where is Where.CONTAINER_MOUNT:
        return Clause("(has(c.volumeMounts) && c.volumeMounts.exists(m, m.mountPath.contains('%s')))", True, value)
    if where is Where.NODE_LABEL:
        # Pinned as PodView.pinned_to reads it (nodeSelector, or a required node-affinity term with
        # In/Exists on the label), not "any affinity": every DaemonSet pod has one (the controller's
        # metadata.name term), and most charts set podAntiAffinity.
        if trigger.setting == "gpuNodeLabels":  # a list: the accelerator label, the others, the vendors'
            return Clause(cel.pinned_to("@nodeLabels@"), False, "")
        if trigger.text == INSTANCE_TYPE:  # only the GPU machine families (gpus.on_gpu_instance_type)
            return Clause(
                f"(has(object.spec.nodeSelector) && {cel.lit(INSTANCE_TYPE)} in object.spec.nodeSelector && "
                f"@instanceTypes@.exists(p, object.spec.nodeSelector[{cel.lit(INSTANCE_TYPE)}].startsWith(p)))",
                False,
                "",
            )
        return Clause(cel.pinned_to(f"[{cel.lit(trigger.text)}]"), False, "")
    if where is Where.RUNTIME_CLASS:
        return Clause(
            "(has(object.spec.runtimeClassName) && %s.exists(r, r == object.spec.runtimeClassName))",
            False,
            f"(toJson {value})",
        )
    if where is Where.HOSTPATH_VOLUME:
        return Clause("(has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.hostPath)))", False, "")
    if where is Where.PRIVILEGED:
        return Clause(
            "(has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged)", True, ""
        )
    if where is Where.HOST_PID:
        return Clause("(has(object.spec.hostPID) && object.spec.hostPID)", False, "")
    if where is Where.CAPABILITIES:
        return Clause(
            "(has(c.securityContext) && has(c.securityContext.capabilities) && "
            "has(c.securityContext.capabilities.add) && size(c.securityContext.capabilities.add) > 0)",
            True,
            "",
        )
    if where is Where.ANNOTATION:
        return Clause(
            "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.contains('%s')))",
            False,
            value,
        )
    raise AssertionError(f"no CEL for {where}")


_HOLES: Final = re.compile(r"%s|@(\w+)@")


def _printf(c: Clause) -> str:
    """Helm printing the clause: each %s is its value, each @name@ the chart value the native
    policies print for it (webhook.buildtime.native.VALUES), so both read the same names."""
    from .native import VALUES

    args: list[str] = []

    def hole(m: re.Match[str]) -> str:
        args.append(c.value if m[1] is None else VALUES[m[1]])
        return "%s"

    text = _HOLES.sub(hole, c.cel.replace("%", "%%").replace("%%s", "%s"))
    if not args:
        return json.dumps(c.cel)
    return f"(printf {json.dumps(text)} {' '.join(args)})"


def _condition_body(gated: list[tuple[str, Clause]]) -> str:
    """Helm that collects the clauses whose gate is true and prints the CEL expression ("false" if none)."""
    lines = ["{{- $cs := list -}}", "{{- $ps := list -}}"]
    seen: dict[Clause, list[str]] = {}
    for gate, c in gated:
        seen.setdefault(c, []).append(gate)
    for c, gates in seen.items():
        target = "$cs" if c.per_container else "$ps"
        test = gates[0] if len(gates) == 1 else f"or {' '.join(f'({g})' for g in gates)}"
        lines.append(f"{{{{- if {test} }}}}{{{{- {target} = append {target} {_printf(c)} -}}}}{{{{- end }}}}")
    lines += [
        "{{- if $cs -}}",
        '{{- $in := join " || " $cs -}}',
        '{{- $ps = prepend $ps (printf "(has(object.spec.ephemeralContainers) && '
        'object.spec.ephemeralContainers.exists(c, %s))" $in) -}}',
        '{{- $ps = prepend $ps (printf "(has(object.spec.initContainers) && '
        'object.spec.initContainers.exists(c, %s))" $in) -}}',
        '{{- $ps = prepend $ps (printf "object.spec.containers.exists(c, %s)" $in) -}}',
        "{{- end -}}",
        '{{- if $ps }}{{ join " || " $ps }}{{ else }}false{{ end -}}',
    ]
    return "\n".join(lines)


def _update_condition() -> str:
    """CEL: not a Pod UPDATE, or one whose device-injection annotations differ from the old pod's."""
    from ..policy.rules import gke_device_annotation as gke
    from ..policy.rules import no_cdi_annotations as cdi

    exact = sorted({gke.PREFIX_ROOT[:-1], *gke.BARE_NRI, *gke.CRIO_DEVICES, *cdi.BARE})
    prefixes = sorted({gke.PREFIX_ROOT, *gke.NRI_PREFIXES, *cdi.PREFIXES})
    injects = f"(k in {json.dumps(exact)} || {json.dumps(prefixes)}.exists(p, k.startsWith(p)))"
    old = "oldObject.metadata.annotations"
    return (
        "request.operation != 'UPDATE' || request.subResource != '' || "
        f"(has(object.metadata.annotations) && object.metadata.annotations.exists(k, {injects} && "
        f"!(has({old}) && k in {old} && {old}[k] == object.metadata.annotations[k])))"
    )


def _rule_gate(rule_id: str) -> str:
    return f'ne (index $p.rules "{rule_id}" | default "deny") "off"'


ENFORCEMENT: Final = '(include "gpu-policy.enforcement" .)'


def _gates(rule: Any) -> tuple[str, str]:
    """Helm tests for whether `rule`'s triggers go to the fail-closed pods webhook, and to the
    fail-open one. Fail-closed: a rule that denies and has no CEL twin (or enforcement webhook, where
    the webhook is all there is); a twinned deny rule in `both` is the API server's first, so the
    webhook is only its backup and fails open; in `native` the twin alone judges. Fail-open: warn
    and audit, whose loss in an outage is a warning, never a pod. A rule's switch must be on."""
    mode = f'(index $p.rules "{rule.id}" | default "{rule.default_mode.value}")'
    switch = f" (${'p.' + rule.switch})" if rule.switch else ""
    reports = f'(has {mode} (list "warn" "audit"))'
    denies = f'(eq {mode} "deny")'
    if rule.native is None:
        return f"and {denies}{switch}", f"and {reports}{switch}"
    return (
        f'and {denies} (eq {ENFORCEMENT} "webhook"){switch}',
        f'and (ne {ENFORCEMENT} "native") (or {reports} {denies}){switch}',
    )


def _switch_gate(key: str) -> str:
    return f"$p.{key}"


def template_source() -> str:
    from ..policy import MUTATIONS, OBJECT_RULES, RULES, Where
    from ..policy.cel import CLAIMS
    from ..policy.templates import WORKLOADS

    header = (
        "{{/*\nGenerated by `make generate` (python -m webhook.buildtime.generate) from webhook/policy/registry.py\n"
        "and webhook/policy/templates.py: do not edit. Which pods can matter is declared once, by each\n"
        "rule's and mutation's triggers; tests/test_match_conditions.py proves these conditions send\n"
        "every pod the policy acts on.\n*/}}\n\n"
    )
    # The fail-closed pods webhook is sent only what a rule that denies there could fire on; the
    # fail-open one what the rest could (_gates), minus what the first is sent.
    pods = [(_gates(r)[0], clause(t)) for r in RULES for t in r.triggers]
    reported = [(_gates(r)[1], clause(t)) for r in RULES for t in r.triggers]
    # Where the API server's policies judge (both, native), a pod with DRA claims goes to the
    # fail-closed webhook whenever a twinned rule denies: those policies leave such pods to the
    # webhook (cel.NO_CLAIMS), since only the cluster view tells a GPU claim from a NIC's.
    twinned = [f'eq (index $p.rules "{r.id}" | default "{r.default_mode.value}") "deny"' for r in RULES if r.native]
    pods.append(
        (
            f'and (ne {ENFORCEMENT} "webhook") (or {" ".join(f"({g})" for g in twinned)})',
            Clause(CLAIMS, False, ""),
        )
    )
    out = header
    gates = [_rule_gate(r.id) for r in RULES if r.watches_namespaces]
    watches = gates[0] if len(gates) == 1 else f"or {' '.join(f'({g})' for g in gates)}"
    out += (
        '{{/* "true" while a rule that reads namespaces from the cluster view is on: the server then\n'
        "watches them (webhook.policy.engine.watches_namespaces) and the ClusterRole grants it. */}}\n"
        '{{- define "gpu-policy.watchesNamespaces" -}}\n{{- $p := .Values.policy -}}\n'
        + f"{{{{- if {watches} -}}}}true{{{{- end -}}}}\n"
        + "{{- end -}}\n\n"
    )
    out += (
        '{{/* CEL for the pods webhook: a pod any enabled rule could fire on ("false": none can). */}}\n'
        '{{- define "gpu-policy.podsCondition" -}}\n{{- $p := .Values.policy -}}\n'
        + _condition_body(pods)
        + "\n{{- end -}}\n\n"
    )
    out += (
        "{{/* CEL for the fail-open pods webhook: a pod a warn or audit rule (or, in enforcement both, a rule\n"
        'the API server\'s own policies judge first) could fire on ("false": none can). */}}\n'
        '{{- define "gpu-policy.podsReportCondition" -}}\n{{- $p := .Values.policy -}}\n'
        + _condition_body(reported)
        + "\n{{- end -}}\n\n"
    )
    out += (
        "{{/* CEL for the pods webhook on a Pod UPDATE: only one that adds or changes a device-injection\n"
        "annotation (read again when the node makes the pod's sandbox anew), never a label or status. */}}\n"
        '{{- define "gpu-policy.podsUpdateCondition" -}}\n' + _update_condition() + "\n{{- end -}}\n\n"
    )
    every = [_switch_gate(m.switch) for m in MUTATIONS if any(t.where is Where.EVERY_POD for t in m.triggers)]
    rest = [
        (_switch_gate(m.switch), clause(t))
        for m in MUTATIONS
        if not any(t.where is Where.EVERY_POD for t in m.triggers)
        for t in m.triggers
    ]
    every_test = every[0] if len(every) == 1 else f"or {' '.join(f'({g})' for g in every)}"
    out += (
        "{{/* CEL for the mutating webhook; empty when an enabled mutation applies to every pod\n"
        "(then the webhook has no matchConditions). */}}\n"
        '{{- define "gpu-policy.mutateCondition" -}}\n{{- $p := .Values.policy -}}\n'
        + (f"{{{{- if not ({every_test}) -}}}}\n" if every else "")
        + _condition_body(rest)
        + ("\n{{- end -}}" if every else "")
        + "\n{{- end -}}\n\n"
    )

    # Workloads webhook rules: built-in kinds with templates and object-rule kinds, by API group,
    # then each CRD group behind its webhook.customResources switch.
    builtin: dict[str, list[str]] = {}
    crds: dict[tuple[str, str], list[str]] = {}
    for w in WORKLOADS:
        if w.kind == "Pod" and not w.group:
            continue  # pods have their own webhook
        if w.chart_switch:
            crds.setdefault((w.chart_switch, w.group), []).append(w.plural)
        else:
            builtin.setdefault(w.group, []).append(w.plural)
    # The object rules' kinds: in enforcement native the API server's own policies judge them (every
    # object rule has a CEL twin: tests/test_native_objects.py), so the webhook is not sent them.
    objects: dict[str, list[str]] = {}
    for rule in OBJECT_RULES:
        assert rule.native is not None, f"{rule.id}: an object rule without a twin must stay in the webhook"
        for group, _kind, plural in rule.kinds:
            objects.setdefault(group, []).append(plural)

    def rule_yaml(group: str, versions: str, resources: list[str], scope: str = "Namespaced") -> str:
        return (
            f"- apiGroups: [{json.dumps(group)}]\n  apiVersions: [{json.dumps(versions)}]\n"
            f'  operations: ["CREATE", "UPDATE"]\n  resources: {json.dumps(resources)}\n  scope: {json.dumps(scope)}\n'
        )

    out += '{{/* Rules of the workloads webhook. */}}\n{{- define "gpu-policy.workloadRules" -}}\n'
    out += "".join(rule_yaml(g, "v1", res) for g, res in builtin.items())
    out += (
        '{{- if ne (include "gpu-policy.enforcement" .) "native" }}\n'
        + "".join(rule_yaml(g, "v1", res) for g, res in objects.items())
        + "{{- end }}\n"
    )
    for (switch, group), res in crds.items():
        # "*": some CRDs are cluster-scoped (Argo's ClusterWorkflowTemplate, Trainer's ClusterTrainingRuntime).
        out += (
            f"{{{{- if .Values.webhook.customResources.{switch} }}}}\n"
            + rule_yaml(group, "*", res, "*")
            + "{{- end }}\n"
        )
    out += "{{- end -}}\n\n"
    from .native import defines

    return out + defines()
