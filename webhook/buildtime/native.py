"""The chart's native admission policies: each mutation's CEL twin (webhook.policy.rule.NativeMutation)
rendered as a MutatingAdmissionPolicy and its binding, into charts/gpu-policy/templates/_generated.tpl.

The twin is written beside the mutation it mirrors; here its `@name@` values become Helm that
prints them as CEL literals from the chart's own policy values at render time, so the policy has
no paramKind (a policy whose parameter object is a CRD can deny everything while an API server
restarts: kubernetes#124237). charts/gpu-policy/templates/admissionpolicies.yaml decides where it
is installed (the `enforcement` value); tests/test_native.py proves it patches as the webhook does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Final

from ..policy.cel import Root
from ..policy.engine import DENY_PREFIX, WARN_PREFIX
from ..policy.rule import NativeRule
from ..policy.vendors import NVIDIA, OTHERS, Vendor


def _joined(configured: str, theirs: Callable[[Vendor], tuple[str, ...]]) -> str:
    """A configured list with each enabled vendor's names after it, as config.settings joins them
    (the server's Policy has the joined list, so the twins must too)."""
    parts = [configured] + [
        f"(ternary (list {' '.join(json.dumps(n) for n in theirs(v))}) (list) $p.vendors.{v.key}.enabled)"
        for v in OTHERS
    ]
    # Sprig's concat of nothing but empty lists is nil, which toJson prints as null (and `k in null`
    # fails the policy): default turns it back into an empty list.
    return f"(default (list) (concat {' '.join(parts)}))"


# What each @name@ of a twin is, in Helm over `$p` (.Values.policy): a CEL literal.
VALUES: Final = {
    # Device resources, the GPU resource itself always among them, as [prefix, suffix, "*"] or
    # [name, "", "="] (config validation allows one "*" and no other glob character).
    "devices": '(include "gpu-policy.celNames" '
    + _joined("(prepend $p.gpuDeviceResources $p.gpuResourceName)", lambda v: v.devices + v.node_wide)
    + ")",
    "companions": f'(include "gpu-policy.celNames" {_joined("$p.gpuCompanionResources", lambda v: v.companions)})',
    "shared": f'(include "gpu-policy.celNames" {_joined("$p.gpuSharedResources", lambda v: v.shared)})',
    # Node labels that pin a pod to GPU nodes (gpus.pinned_to_gpu_nodes), and GPU machine families.
    "nodeLabels": "(toJson "
    + _joined("(prepend $p.gpuNodeLabels $p.acceleratorNodeSelector.labelKey)", lambda v: v.node_labels)
    + ")",
    "instanceTypes": "(toJson $p.gpuInstanceTypes)",
    "controllerKinds": "(toJson $p.gpuControllerKinds)",
    "runtimeClasses": f"(toJson {_joined('$p.gpuRuntimeClasses', lambda v: v.runtime_classes)})",
    "agentImages": f"(toJson {_joined('$p.nodeAgentImages', lambda v: v.agent_images)})",
    # Node-wide resources count only where another vendor is on (gpus.node_agent).
    "nodeWide": "(toJson (ternary "
    + _joined(f"(list {' '.join(json.dumps(n) for n in NVIDIA.node_wide)})", lambda v: v.node_wide)
    + " (list) (or "
    + " ".join(f"$p.vendors.{v.key}.enabled" for v in OTHERS)
    + ")))",
    "intel": '(ternary "true" "false" $p.vendors.intel.enabled)',
    "kai": '(ternary "true" "false" $p.integrations.kai.enabled)',
    "maxPerPod": "(int $p.gpuMaxPerPod)",
    "isolate": '(ternary "true" "false" $p.isolateNonGpu)',
    "amdRuntime": '(ternary "true" "false" (and $p.vendors.amd.enabled $p.vendors.amd.runtimeEnv))',
    "kaiSchedulers": "(toJson $p.integrations.kai.schedulerNames)",
    # The release namespace is always exempt (gpu-policy.config adds it to the server's too).
    "exemptNamespaces": "(toJson (concat $p.exemptNamespaces .Values.webhook.excludedNamespaces "
    "(list .Release.Namespace) | uniq))",
    "exemptUsernames": "(toJson $p.exemptUsernames)",
    "exemptServiceAccounts": "(toJson $p.exemptServiceAccounts)",
    "amd": '(ternary "true" "false" $p.vendors.amd.enabled)',
    "resourceName": "$p.gpuResourceName",
    # gpu-namespace-allowed's namespaces and selector (matchLabels as a CEL map; each expression
    # [[key, operator], values]), and the selector as its message writes it.
    "gpuNamespaces": "(toJson $p.gpuNamespaces)",
    "nsLabels": "(toJson ((($p.gpuNamespaceSelector | default dict).matchLabels) | default dict))",
    "nsExpressions": '(include "gpu-policy.nsExpressions" $p)',
    "nsWanted": '(include "gpu-policy.nsWanted" $p | toJson)',
    "draAdminNamespaces": "(toJson $p.draAdminAccessNamespaces)",
    "sharedGpu": '(ternary "true" "false" $p.sharedGpu)',
    "toolkitEnv": '(ternary "true" "false" $p.nodeProfile.toolkitReadsEnv)',
    "hami": '(ternary "true" "false" $p.integrations.hami.enabled)',
    "xgpu": '(ternary "true" "false" $p.integrations.xgpu.enabled)',
    # A rule's message starts with its mode's words (engine.DENY_PREFIX / WARN_PREFIX), as a CEL string.
    # (policy.rollout audit: no rule denies, so a deny rule's message says "would violate".)
    "prefix": f'(toJson (ternary "{DENY_PREFIX}" "{WARN_PREFIX}" (and (eq .mode "deny") (ne $p.rollout "audit"))))',
}

_PLACEHOLDER: Final = re.compile(r"@(\w+)@")


def helm(cel: str) -> str:
    """`cel` as Helm text: every @name@ replaced by the action printing its value."""

    def action(m: re.Match[str]) -> str:
        return "{{ " + VALUES[m[1]] + " }}"

    return _PLACEHOLDER.sub(action, cel)


def _block(cel: str, indent: int) -> str:
    """A CEL expression as a YAML block scalar: nothing to escape, and what the Helm actions
    print (JSON lists of strings, which are CEL list literals too) goes in as it is."""
    assert "\n" not in cel
    return "|-\n" + " " * indent + cel


def _resource_rules(root: Root) -> str:
    """A root's matchConstraints.resourceRules: Pods on create and `kubectl debug`'s ephemeral
    containers; a template on create and update (an update that keeps a deny-mode violation is
    refused too: the pods it would make are refused anyway)."""
    if root.name == "pod":
        return (
            '- apiGroups: [""]\n  apiVersions: ["v1"]\n  operations: ["CREATE"]\n  resources: ["pods"]\n'
            '- apiGroups: [""]\n  apiVersions: ["v1"]\n  operations: ["UPDATE"]\n'
            '  resources: ["pods/ephemeralcontainers"]\n'
        )
    groups: dict[str, list[str]] = {}
    for group, plural in root.resources:
        groups.setdefault(group, []).append(plural)
    return "".join(
        f'- apiGroups: ["{group}"]\n  apiVersions: ["v1"]\n  operations: ["CREATE", "UPDATE"]\n'
        f"  resources: [{', '.join(json.dumps(p) for p in plurals)}]\n"
        for group, plurals in groups.items()
    )


SHARED: Final = "shared_"  # the scope of the variables several twins define alike (shared_variables)


def scoped(rule: str, variables: tuple[tuple[str, str], ...], cel: str, shared: dict[str, str] | None = None) -> str:
    """A twin's CEL with its variables renamed into the rule's own scope (`no_privileged_gpu_gpuPod`),
    or to the shared variable it is one of (`shared`: its name to the shared one's): the chart
    installs every twin of one mode in one ValidatingAdmissionPolicy, whose variables share one
    namespace."""
    names = [name for name, _ in variables]
    if not names:
        return cel
    target = {name: (shared or {}).get(name, scope_of(rule) + name) for name in names}
    return re.sub(
        r"\bvariables\.(" + "|".join(map(re.escape, names)) + r")\b", lambda m: f"variables.{target[m[1]]}", cel
    )


def scope_of(rule: str) -> str:
    """The prefix of a rule's variables in the shared policy (scoped)."""
    return rule.replace("-", "_") + "_"


def _references(cel: str) -> set[str]:
    return set(re.findall(r"\bvariables\.(\w+)", cel))


def shared_variables(twins: list[tuple[str, NativeRule]]) -> tuple[dict[str, dict[str, str]], list[tuple[str, str]]]:
    """The variables two or more twins define alike (the same name and CEL, and reading only
    variables that are shared too), defined once per policy: per rule id its names to the shared
    ones', and the shared ones in an order where each follows what it reads. Why: the API server
    evaluates a policy's variables once each, by name; thirteen twins define the same 5 kB
    `nodeAgent`, and as thirteen scoped copies one policy evaluated it up to thirteen times."""
    count: dict[tuple[str, str], int] = {}
    for _, twin in twins:
        for pair in twin.variables:
            count[pair] = count.get(pair, 0) + 1
    alike = {pair for pair, n in count.items() if n > 1}
    while True:  # drop what reads a variable that is not shared, until nothing changes
        kept = set()
        for _, twin in twins:
            mine = dict(twin.variables)
            kept |= {
                (n, t)
                for n, t in twin.variables
                if (n, t) in alike and all((r, mine.get(r)) in alike for r in _references(t) if r in mine)
            }
        if kept == alike:
            break
        alike = kept
    named: dict[tuple[str, str], str] = {}
    order: list[tuple[str, str]] = []
    for rule, twin in twins:
        mine = dict(twin.variables)
        for name, text in twin.variables:
            pair = (name, text)
            if pair in alike and pair not in named:
                taken = sum(1 for n, _ in named if n == name)
                named[pair] = f"{SHARED}{name}" + (f"_{taken + 1}" if taken else "")
                renames = {n: named[(n, mine[n])] for n in _references(text) if n in mine}
                order.append((named[pair], scoped(rule, twin.variables, text, renames)))
    per_rule = {rule: {n: named[(n, t)] for n, t in twin.variables if (n, t) in named} for rule, twin in twins}
    return per_rule, order


def _rules() -> str:
    """What templates/admissionpolicies.yaml puts together: the rule ids with a twin and each one's
    roots (Pods, each built-in template path, unless it judges Pods only); per root its resource
    rules and its matchConditions (the exemptions; a template's also lets a deleting controller
    go); per rule and root its variables (scoped) and validations. The chart installs one
    ValidatingAdmissionPolicy per mode and root holding every twin of that mode: a policy costs a
    pod create about a millisecond in the API server whatever it holds (a trivial one +0.85 ms on
    kube-apiserver 1.36), so ten policies cost more than both webhooks, two do not."""
    from ..policy import RULES
    from ..policy.cel import ACTIONS, EXEMPTIONS, NO_CLAIMS, NOT_DELETING, ROOTS, rooted

    twins = [r for r in RULES if r.native is not None]
    scopes = [SHARED] + [scope_of(r.id) for r in twins]
    assert not [(a, b) for a in scopes for b in scopes if a != b and b.startswith(a)], "a scope is another's prefix"
    shared, order = shared_variables([(r.id, r.native) for r in twins if r.native is not None])
    actions = " ".join(f'"{mode}" "{action}"' for mode, action in ACTIONS.items())
    out = (
        "{{/* The rules with a CEL twin: in enforcement both or native, one ValidatingAdmissionPolicy per mode "
        "and root holds them. */}}\n"
        f'{{{{- define "gpu-policy.nativeRuleIds" -}}}}{" ".join(r.id for r in twins)}{{{{- end -}}}}\n\n'
        f'{{{{- define "gpu-policy.nativeRootNames" -}}}}{" ".join(root.name for root in ROOTS)}{{{{- end -}}}}\n\n'
        "{{/* A mode (the context) as its binding's validationActions. */}}\n"
        f'{{{{- define "gpu-policy.validationAction" -}}}}{{{{ get (dict {actions}) . }}}}{{{{- end -}}}}\n\n'
    )
    for root in ROOTS:
        out += (
            f'{{{{- define "gpu-policy.nativeResources.{root.name}" -}}}}\n{_resource_rules(root).rstrip()}\n'
            "{{- end -}}\n\n"
        )
        conditions = [(name, rooted(cel, root)) for name, cel in (*EXEMPTIONS, NO_CLAIMS)]
        if root.name != "pod":
            conditions.append(NOT_DELETING)
        lines = [f'{{{{- define "gpu-policy.nativeConditions.{root.name}" -}}}}', "{{- $p := .Values.policy -}}"]
        lines.append("matchConditions:")
        for name, cel in conditions:
            lines += [f"  - name: {name}", f"    expression: {_block(helm(cel), 6)}"]
        out += "\n".join([*lines, "{{- end -}}", ""]) + "\n"
    out += (
        "{{/* The variables several twins define alike, defined once in a policy that holds any of them: "
        "the API server evaluates each variable once. */}}\n"
        f'{{{{- define "gpu-policy.nativeSharedNames" -}}}}{" ".join(n for n, _ in order)}{{{{- end -}}}}\n\n'
    )
    for name, text in order:
        for root in ROOTS:
            out += (
                f'{{{{- define "gpu-policy.nativeShared.{name}.{root.name}" -}}}}\n{{{{- $p := .Values.policy -}}}}\n'
                f"- name: {name}\n  expression: {_block(helm(rooted(text, root)), 6)}\n{{{{- end -}}}}\n"
            )
        out += "\n"
    for r in twins:
        assert r.native is not None
        twin = r.native
        mine = shared[r.id]
        out += (
            f'{{{{- define "gpu-policy.nativeSharedOf.{r.id}" -}}}}{" ".join(sorted(set(mine.values())))}'
            "{{- end -}}\n\n"
        )
        roots = [root for root in ROOTS if twin.judges(root.name)]
        names = " ".join(root.name for root in roots)
        out += (
            f"{{{{/* Where {r.id}'s twin judges pods. */}}}}\n"
            f'{{{{- define "gpu-policy.nativeRoots.{r.id}" -}}}}{names}{{{{- end -}}}}\n\n'
        )
        prefix = scope_of(r.id)

        def block(
            text: str,
            root: Root,
            rule: str = r.id,
            variables: tuple[tuple[str, str], ...] = twin.variables,
            renames: dict[str, str] = mine,
        ) -> str:
            return _block(helm(rooted(scoped(rule, variables, text, renames), root)), 6)

        for root in roots:
            lines = [
                f"{{{{/* {r.id} on {root.path}, in the API server: the CEL twin in webhook/policy/rules. */}}}}",
                f'{{{{- define "gpu-policy.nativeVariables.{r.id}.{root.name}" -}}}}',
                "{{- $p := .Values.policy -}}",
            ]
            for name, text in twin.variables:
                if name not in mine:
                    lines += [f"- name: {prefix}{name}", f"  expression: {block(text, root)}"]
            lines += ["{{- end -}}", f'{{{{- define "gpu-policy.nativeValidations.{r.id}.{root.name}" -}}}}']
            lines.append("{{- $p := .Values.policy -}}")
            guard = f'{{{{ include "gpu-policy.excepted" (list . "{r.id}" "{root.cel}.metadata") }}}}'
            for check in twin.checks:
                # The exceptions in force for this rule (engine.excepted), rendered by the chart.
                expression = helm(rooted(scoped(r.id, twin.variables, check.expression, mine), root))
                lines += [
                    f"- expression: {_block(guard + '(' + expression + ')', 6)}",
                    f"  messageExpression: {block(check.message, root)}",
                    "  reason: Forbidden",
                ]
            lines += ["{{- end -}}", ""]
            out += "\n".join(lines) + "\n"
    return out


def _objects() -> str:
    """Per object rule with a twin (rule.ObjectRule.native: LimitRanges, ResourceQuotas, DRA claims)
    the body of its own ValidatingAdmissionPolicy: its kinds on create and update, the request-level
    exemptions (namespaces, users: an object has no service account) and a deleting object let go,
    its variables and validations over the object itself. One policy per rule, not per mode: these
    objects are created rarely, so a policy's fixed cost is paid by no pod create."""
    from ..policy import OBJECT_RULES
    from ..policy.cel import NOT_DELETING, REQUEST_EXEMPTIONS

    twins = [r for r in OBJECT_RULES if r.native is not None]
    out = (
        "{{/* The object rules with a CEL twin: in enforcement both or native, each has a ValidatingAdmissionPolicy "
        "of its own. */}}\n"
        f'{{{{- define "gpu-policy.nativeObjectIds" -}}}}{" ".join(r.id for r in twins)}{{{{- end -}}}}\n\n'
    )
    for r in twins:
        assert r.native is not None and not r.native.roots, f"{r.id}: an object rule's twin has no roots"
        groups: dict[str, list[str]] = {}
        for group, _kind, plural in r.kinds:
            groups.setdefault(group, []).append(plural)
        lines = [
            f"{{{{/* {r.id}, in the API server: the CEL twin in webhook/policy/rules. */}}}}",
            f'{{{{- define "gpu-policy.nativeObject.{r.id}" -}}}}',
            "{{- $p := .Values.policy -}}",
            "matchConstraints:",
            "  resourceRules:",
        ]
        for group, plurals in groups.items():
            lines += [
                f'    - apiGroups: ["{group}"]',
                '      apiVersions: ["v1"]',
                '      operations: ["CREATE", "UPDATE"]',
                f"      resources: [{', '.join(json.dumps(p) for p in plurals)}]",
            ]
        lines.append("matchConditions:")
        for name, cel in (*REQUEST_EXEMPTIONS, NOT_DELETING):
            lines += [f"  - name: {name}", f"    expression: {_block(helm(cel), 6)}"]
        lines.append("variables:")
        for name, cel in r.native.variables:
            lines += [f"  - name: {name}", f"    expression: {_block(helm(cel), 6)}"]
        lines.append("validations:")
        for check in r.native.checks:
            lines += [
                f"  - expression: {_block(helm(check.expression), 6)}",
                f"    messageExpression: {_block(helm(check.message), 6)}",
                "    reason: Forbidden",
            ]
        out += "\n".join([*lines, "{{- end -}}", ""]) + "\n"
    return out


def defines() -> str:
    """The generated defines: the CEL name lists, one MutatingAdmissionPolicy per mutation's twin
    and one ValidatingAdmissionPolicy per rule's."""
    from ..policy import MUTATIONS
    from ..policy.cel import EXEMPTIONS

    out = (
        '{{/* A list of resource names as CEL: [[prefix, suffix, "*"] | [name, "", "="], ...]. */}}\n'
        '{{- define "gpu-policy.celNames" -}}\n{{- $out := list -}}\n{{- range . -}}\n'
        '{{- if contains "*" . -}}{{- $parts := splitList "*" . -}}'
        '{{- $out = append $out (list (index $parts 0) (index $parts 1) "*") -}}\n'
        '{{- else -}}{{- $out = append $out (list . "" "=") -}}{{- end -}}\n'
        "{{- end -}}\n{{- toJson $out -}}\n{{- end -}}\n\n"
    )
    out += (
        "{{/* gpu-namespace-allowed's selector as CEL: each matchExpression as [[key, operator], values] "
        '(values [""] for Exists and DoesNotExist). */}}\n'
        '{{- define "gpu-policy.nsExpressions" -}}\n{{- $out := list -}}\n'
        "{{- range $e := ((.gpuNamespaceSelector | default dict).matchExpressions | default list) -}}\n"
        '{{- $out = append $out (list (list $e.key $e.operator) ($e.values | default (list ""))) -}}\n'
        "{{- end -}}\n{{- toJson $out -}}\n{{- end -}}\n\n"
        "{{/* The selector as a person writes it (rules/gpu_namespace_allowed.wanted): "
        "`team=ml,tier in (a,b),gpu,!frozen`. */}}\n"
        '{{- define "gpu-policy.nsWanted" -}}\n{{- $parts := list -}}\n'
        "{{- $sel := .gpuNamespaceSelector | default dict -}}\n"
        '{{- range $k, $v := ($sel.matchLabels | default dict) -}}{{- $parts = append $parts (printf "%s=%s" $k $v) -}}'
        "{{- end -}}\n"
        "{{- range $e := ($sel.matchExpressions | default list) -}}\n"
        '{{- if or (eq $e.operator "In") (eq $e.operator "NotIn") -}}'
        '{{- $parts = append $parts (printf "%s %s (%s)" $e.key (lower $e.operator) (join "," $e.values)) -}}\n'
        '{{- else if eq $e.operator "Exists" -}}{{- $parts = append $parts $e.key -}}\n'
        '{{- else -}}{{- $parts = append $parts (printf "!%s" $e.key) -}}{{- end -}}\n'
        '{{- end -}}\n{{- join "," $parts -}}\n{{- end -}}\n\n'
    )
    for m in MUTATIONS:
        if m.native is None:
            continue
        twin = m.native
        lines = [
            f"{{{{/* {m.id}, in the API server: the CEL twin in webhook/policy/mutations. */}}}}",
            f'{{{{- define "gpu-policy.native.{m.id}" -}}}}',
            "{{- $p := .Values.policy -}}",
            "matchConditions:",
        ]
        for name, cel in (*EXEMPTIONS, *twin.conditions):
            lines += [f"  - name: {name}", f"    expression: {_block(helm(cel), 6)}"]
        lines.append("variables:")
        for name, cel in twin.variables:
            lines += [f"  - name: {name}", f"    expression: {_block(helm(cel), 6)}"]
        lines += [
            "mutations:",
            "  - patchType: JSONPatch",
            "    jsonPatch:",
            f"      expression: {_block(helm(twin.patch), 8)}",
            "{{- end -}}",
            "",
        ]
        out += "\n".join(lines) + "\n"
    return out + _rules() + _objects()
