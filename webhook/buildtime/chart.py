"""The chart's generated template (charts/gpu-policy/templates/_generated.tpl): the matchConditions
CEL of the pods and mutating webhooks, derived from every rule's and mutation's triggers, the
rules of the workloads webhook, and whether the server watches namespaces (Rule.watches_namespaces).
tests/test_match_conditions.py proves the CEL sends every pod the policy acts on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Clause:
    """One CEL test, over a container `c` (per_container) or over the Pod `object`."""

    cel: str  # a Go printf format: %s is the trigger's value
    per_container: bool
    value: str  # Helm expression for %s, or "" when the trigger has no value


def clause(trigger: Any) -> Clause:
    """How the chart's CEL spells a trigger."""
    from ..policy import Where

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
        # Patterns with "*" have no simple CEL spelling: send every container with an extended
        # (domain-qualified) resource, a superset of the GPU model's names.
        return Clause(
            "(has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.contains('/'))) || "
            "(has(c.resources.requests) && c.resources.requests.exists(k, k.contains('/')))))",
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
        # Any required affinity may pin the label (In/Exists on it): send every pod that has one.
        if trigger.setting == "gpuNodeLabels":  # a list: the accelerator label, the others, the vendors'
            own = "(prepend $p.gpuNodeLabels $p.acceleratorNodeSelector.labelKey)"
            labels = f"(toJson (concat {own} {_vendor_lists('node_labels')}))"
            return Clause(
                "((has(object.spec.nodeSelector) && %s.exists(l, l in object.spec.nodeSelector)) || "
                "has(object.spec.affinity))",
                False,
                labels,
            )
        return Clause(
            "((has(object.spec.nodeSelector) && '%s' in object.spec.nodeSelector) || has(object.spec.affinity))",
            False,
            value,
        )
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
    if where is Where.ANNOTATION:
        return Clause(
            "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.contains('%s')))",
            False,
            value,
        )
    raise AssertionError(f"no CEL for {where}")


def _vendor_lists(field: str) -> str:
    """Helm for the names of `field` (a Vendor tuple) of each other vendor that is on: what
    webhook.config adds to the top-level lists, so the chart's CEL sees the same names."""
    from ..policy.vendors import OTHERS

    parts = []
    for vendor in OTHERS:
        names = " ".join(json.dumps(n) for n in getattr(vendor, field))
        parts.append(f"(ternary (list {names}) (list) $p.vendors.{vendor.key}.enabled)")
    return " ".join(parts)


def _printf(c: Clause) -> str:
    text = json.dumps(c.cel)
    if not c.value:
        return text
    args = " ".join([c.value] * c.cel.count("%s"))
    return f"(printf {text} {args})"


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


def _rule_gate(rule_id: str) -> str:
    return f'ne (index $p.rules "{rule_id}" | default "deny") "off"'


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
    # In enforcement native a rule with a CEL twin is the API server's alone: the webhook is sent
    # only what the other rules could fire on (in both it judges everything, as a backup).
    pods = [
        (
            _rule_gate(r.id)
            if r.native is None
            else f'and ({_rule_gate(r.id)}) (ne (include "gpu-policy.enforcement" .) "native")',
            clause(t),
        )
        for r in RULES
        for t in r.triggers
    ]
    # In native, a pod with DRA claims is sent whenever a twinned rule is on: the rules' policies
    # leave such pods to the webhook (cel.NO_CLAIMS).
    twinned = [_rule_gate(r.id) for r in RULES if r.native is not None]
    pods.append(
        (
            f'and (eq (include "gpu-policy.enforcement" .) "native") (or {" ".join(f"({g})" for g in twinned)})',
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
