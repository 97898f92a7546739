"""isolate-non-gpu: containers that request no GPU get NVIDIA_VISIBLE_DEVICES=void.

CUDA and NGC images bake NVIDIA_VISIBLE_DEVICES=all into their image config, and the
NVIDIA runtime honours it in unprivileged containers by default: a container that requested
no GPU sees every GPU on the node. A pod-spec env entry overrides the image's, and `void`
makes the runtime inject nothing. It also closes the legacy path where CUDA_VERSION without
NVIDIA_REQUIRE_CUDA defaults to all GPUs. Which containers it leaves alone, and why, is
`gpus.isolated`. Runs on Pod CREATE and, for the ephemeral containers a `kubectl debug`
adds, on the pods/ephemeralcontainers subresource. No warning: it applies to nearly every
pod, and a warning on every `kubectl apply` would train people to ignore warnings.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from .. import cel
from ..cel import KAI_CONTAINER_NAME, LISTS, present
from ..containers import Container
from ..gpus import (
    gets_gpu,
    grants_nothing,
    is_companion,
    is_device,
    plugin_env_gpu,
    vendor_isolated,
)
from ..nvidia import IMEX_CHANNELS, VISIBLE_DEVICES
from ..objects import PodView
from ..patch import Op, append_env
from ..rule import EVERY_POD, Mutation, NativeMutation
from ..types import NO_CHANGES, Changes, ContainerKind, Policy
from ..vendors import AMD

ID = "isolate-non-gpu"
VOID = {"name": VISIBLE_DEVICES, "value": "void"}
VOID_IMEX = {"name": IMEX_CHANNELS, "value": "void"}
assert AMD.isolation is not None
AMD_VAR, AMD_NONE = AMD.isolation
VOID_AMD = {"name": AMD_VAR, "value": AMD_NONE}


def enabled(policy: Policy) -> bool:
    return policy.isolate_non_gpu


# Words in a resource name that suggest a GPU the model does not know (Volcano's vGPU, a
# renamed time-sliced resource, another vendor's sharing plugin): voiding such a container is
# what the invariant wants, but its owner should hear why it lost the card.
_GPU_WORDS: Final = ("gpu", "mig-", "cuda", "nvidia.com/")


def _unknown_gpu_like(c: Container, policy: Policy) -> str:
    for side in (c.limits, c.requests):
        for name in side or ():
            if "/" not in name:
                continue  # cpu, memory, hugepages-*: the common case
            lowered = name.lower()
            if any(w in lowered for w in _GPU_WORDS) and not is_device(name, policy) and not is_companion(name, policy):
                return name
    return ""


def _imex_open(c: Container, view: PodView, policy: Policy) -> bool:
    """An envFrom item of `c` can set NVIDIA_IMEX_CHANNELS, which the toolkit reads whatever
    NVIDIA_VISIBLE_DEVICES says: a container isolation voids gets an explicit `void` for it too.
    (GPU containers with such an envFrom are denied by visible-devices-envfrom instead.)"""
    if not policy.isolate_non_gpu or not c.raw_env_from or IMEX_CHANNELS in c.watched:
        return False
    if plugin_env_gpu(c, view, policy):
        return False
    return any(IMEX_CHANNELS.startswith(prefix) for _, _, prefix in c.env_from)  # nvidia.prefix_reaches


# Images that are there to use a GPU: a container of one that isolation voids is told why it sees
# none (`nvidia-smi: not found` says nothing of the request it lacks).
GPU_IMAGE_HINTS: Final = ("cuda", "nvcr.io/nvidia/", "nvidia/", "vllm", "pytorch", "tensorflow", "-gpu", "triton")


def _gpu_image(image: str) -> bool:
    lowered = image.lower()
    return any(hint in lowered for hint in GPU_IMAGE_HINTS)


def _changes(view: PodView, policy: Policy, skip: Collection[str] = (), only_ephemeral: bool = False) -> Changes:
    ops: list[Op] = []
    warnings: list[str] = []
    unrequested: list[str] = []  # GPU images voided for want of a request: one warning names them
    for c in view.containers:
        if only_ephemeral and (c.kind is not ContainerKind.EPHEMERAL or c.name in skip):
            continue
        imex = _imex_open(c, view, policy)
        if imex:
            ops.append(append_env(c.pointer, c.has_env, dict(VOID_IMEX)))
        gpu_env = plugin_env_gpu(c, view, policy)
        void = policy.isolate_non_gpu and not gpu_env and not grants_nothing(c)  # gpus.isolated
        if void:
            ops.append(append_env(c.pointer, c.has_env or imex, dict(VOID)))
        # Only where nodes run the AMD runtime (the one switch that also turns amd-runtime-envfrom
        # on), and never in a container whose GPU comes through NVIDIA's env: it lands on NVIDIA
        # nodes, where nothing reads the variable, and GPU containers are left as written.
        if policy.amd_runtime_env and policy.isolate_non_gpu and not gpu_env and vendor_isolated(c, AMD):
            ops.append(append_env(c.pointer, c.has_env or imex or void, dict(VOID_AMD)))
        if not void:
            continue
        if not c.claims and not (c.limits or c.requests) and _gpu_image(c.image):
            unrequested.append(f'{c.label} "{c.name}" ({c.image})')
        unknown = _unknown_gpu_like(c, policy) if (c.limits or c.requests) else ""
        if unknown:
            warnings.append(
                f'{ID}: {c.label} "{c.name}" requests {unknown}, which the GPU model does not know as a GPU '
                f"resource, so it gets {VISIBLE_DEVICES}=void and sees no GPU; if it is one, the platform adds it "
                "to gpuDeviceResources (or gpuCompanionResources) in gpu-policy's config"
            )
    if unrequested and not gets_gpu(view, policy):
        warnings.append(
            f"{ID}: {', '.join(unrequested[:3])}{' and more' if len(unrequested) > 3 else ''} runs a GPU image but "
            f"requests no GPU, so it gets {VISIBLE_DEVICES}=void and sees none (nvidia-smi: not found); request one "
            f'with resources.limits["{policy.resource_name}"]'
        )
    return Changes(ops, warnings) if ops else NO_CHANGES


def mutate(view: PodView, policy: Policy) -> Changes:
    return _changes(view, policy)


def mutate_new_ephemeral(view: PodView, policy: Policy, existing: Collection[str]) -> Changes:
    """Only ephemeral containers not in `existing`: everything else in a running pod is immutable."""
    return _changes(view, policy, existing, only_ephemeral=True)


# ---- The CEL twin (a MutatingAdmissionPolicy): the same decisions, container by container, as
# `_changes` above through gpus.isolated, plugin_env_gpu and _imex_open. `@name@` values come from
# the chart's policy values (webhook.buildtime.native.VALUES); tests/test_native.py checks the two
# patch every pod alike, and tests/test_real_apiserver.py runs it in a real API server.


def _cel_amd_gpu(c: str) -> str:
    """gpus.vendor_gpu for AMD: a DRA claim, or a count other than 0 of a resource in AMD's domains."""
    domains = " || ".join(f"k.startsWith('{d}')" for d in AMD.domains)
    sides = " || ".join(
        f"(has({c}.resources.{side}) && {c}.resources.{side}.exists(k, ({domains}) && "
        f"sign(quantity({c}.resources.{side}[k])) != 0))"
        for side in ("limits", "requests")
    )
    return f"(has({c}.resources) && ((has({c}.resources.claims) && size({c}.resources.claims) > 0) || {sides}))"


def _cel_imex(c: str) -> str:
    """_imex_open, but for plugin_env_gpu: an envFrom whose prefix can reach NVIDIA_IMEX_CHANNELS,
    which env does not set."""
    return (
        f"(has({c}.envFrom) && !(has({c}.env) && {c}.env.exists(e, e.name == '{IMEX_CHANNELS}')) && "
        f"{c}.envFrom.exists(f, '{IMEX_CHANNELS}'.startsWith(has(f.prefix) ? f.prefix : '')))"
    )


# The three container lists, as the webhook walks them, and whether only containers the old pod
# lacked are patched (pods/ephemeralcontainers).
_LISTS: Final = tuple((kind.field, kind is ContainerKind.EPHEMERAL) for kind in LISTS)


def _variables(field: str, new_only: bool) -> list[tuple[str, str]]:
    """Per list: the indexes it patches (chosen), of those the GPU ones, then which get which void."""
    name = field[0].upper() + field[1:]
    c = f"object.spec.{field}[i]"
    chosen = "request.operation == 'CREATE'"
    if new_only:  # pods/ephemeralcontainers: only the containers the old pod did not have
        chosen = f"({chosen} || !(has(oldObject.spec.{field}) && oldObject.spec.{field}.exists(o, o.name == {c}.name)))"
    each = f"({present(field)} ? lists.range(size(object.spec.{field})) : [])"
    return [
        (f"gpu{name}", f"{each}.filter(i, {chosen} && {cel.plugin_env_gpu(c)})"),
        (f"void{name}", f"{each}.filter(i, {chosen} && !(i in variables.gpu{name}) && !{cel.grants_nothing(c)})"),
        (f"imex{name}", f"{each}.filter(i, {chosen} && !(i in variables.gpu{name}) && {_cel_imex(c)})"),
        (
            f"amd{name}",
            f"@amdRuntime@ ? {each}.filter(i, {chosen} && !(i in variables.gpu{name}) && !{_cel_amd_gpu(c)} && "
            f"!{cel.grants_nothing(c, AMD_VAR, AMD.no_devices)}) : []",
        ),
    ]


def _ops(field: str) -> str:
    """The JSONPatch ops for one container list, in the order the webhook's patch has them."""
    name = field[0].upper() + field[1:]
    c = f"object.spec.{field}[i]"
    at = f"'/spec/{field}/' + string(i)"
    void, imex, amd = f"variables.void{name}", f"variables.imex{name}", f"variables.amd{name}"
    imex_entry = f'{{"name": "{IMEX_CHANNELS}", "value": "void"}}'
    void_entry = f'{{"name": "{VISIBLE_DEVICES}", "value": "void"}}'
    amd_entry = f'{{"name": "{AMD_VAR}", "value": "{AMD_NONE}"}}'
    return (
        # No env yet: one op creates it with what it needs (the webhook's first op creates it,
        # the second appends: the same list).
        f"({present(field)} ? lists.range(size(object.spec.{field}))"
        f".filter(i, !has({c}.env) && (i in {imex} || i in {void} || i in {amd}))"
        f".map(i, JSONPatch{{op: 'add', path: {at} + '/env', "
        f"value: (i in {imex} ? [{imex_entry}] : []) + (i in {void} ? [{void_entry}] : [])"
        f" + (i in {amd} ? [{amd_entry}] : [])}}) : [])"
        f" + {imex}.filter(i, has({c}.env)).map(i, JSONPatch{{op: 'add', path: {at} + '/env/-', value: {imex_entry}}})"
        f" + {void}.filter(i, has({c}.env)).map(i, JSONPatch{{op: 'add', path: {at} + '/env/-', value: {void_entry}}})"
        f" + {amd}.filter(i, has({c}.env)).map(i, JSONPatch{{op: 'add', path: {at} + '/env/-', value: {amd_entry}}})"
    )


NATIVE: Final = NativeMutation(
    conditions=(),  # beyond cel.EXEMPTIONS, which every twin has
    variables=(("kaiContainer", KAI_CONTAINER_NAME), *(v for field, new in _LISTS for v in _variables(field, new))),
    patch=" + ".join(_ops(field) for field, _new in _LISTS),
)


MUTATION: Mutation = Mutation(
    id=ID,
    mutate=mutate,
    summary="Every container (init, regular, ephemeral) whose GPU does not come through the node's environment "
    "(a device-plugin or companion resource, KAI's injected entry) and whose own last `NVIDIA_VISIBLE_DEVICES` "
    "entry is not exactly `void`, `none` or empty gets `NVIDIA_VISIBLE_DEVICES=void` appended (`env` created when "
    "absent); as the last entry it wins over earlier ones, `envFrom` and the image. DRA claim holders and "
    "containers in GKE device annotations are voided too: their devices come through CDI or device nodes, "
    "which the variable does not narrow. A container that requests an unknown GPU-like resource is warned. "
    "CUDA and NGC images bake `NVIDIA_VISIBLE_DEVICES=all` into the image and the NVIDIA runtime honours it in "
    "unprivileged containers, so without this a pod without a GPU request sees every GPU; it also closes the "
    "legacy `CUDA_VERSION` path and `nvidia.com/gpu: 0`. Left alone: containers with a device resource (MIG "
    "and shared slots included), a companion resource or a KAI fraction (the kubelet puts pod env "
    "after the device plugin's, so a void would hide their GPU); entries granting devices are *not* rewritten, "
    "so `no-visible-devices-env` can deny them with its message; pods of exempt service accounts. On "
    "`pods/ephemeralcontainers` only newly added ephemeral containers are patched. A container without a GPU "
    "whose `envFrom` could set `NVIDIA_IMEX_CHANNELS` (no prefix ruling it out) gets `NVIDIA_IMEX_CHANNELS=void` "
    "too. Where nodes run the AMD Container Runtime (`vendors.amd.runtimeEnv`, off by default), every container "
    "that may get no GPU through NVIDIA's env and no AMD GPU (no count of an "
    "`amd.com/` resource, no DRA claim) and whose last `AMD_VISIBLE_DEVICES` entry is not exactly `none`, "
    "`void` or empty gets `AMD_VISIBLE_DEVICES=none` after it: the AMD Container Runtime adds the GPUs that "
    "variable lists, and ignores `none`. A pod that gets no GPU and runs a GPU image (CUDA, NGC, vLLM, PyTorch, ...) "
    "in a container it voids is told so, once. The opt-out "
    "annotation never turns it off.",
    reads=("containers[*].env", "containers[*].resources", "schedulerName", "metadata.annotations"),
    triggers=EVERY_POD,
    switch="isolateNonGpu",
    enabled=enabled,
    opt_out=False,
    native=NATIVE,
)
