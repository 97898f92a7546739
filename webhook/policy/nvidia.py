"""How the NVIDIA container toolkit reads the variables and capabilities we police.

The toolkit runs on the node, after the kubelet has merged the container's environment (image
ENV, then envFrom, then the device plugin's variables, then the pod's env with `$(VAR)`
expanded; the last entry of a name wins). What it does with a device-list variable, from its
source (NVIDIA/nvidia-container-toolkit):

- current (1.11 and later), internal/config/image/cuda_image.go `CUDA.DevicesFromEnvvars`: split
  the value on ",", `strings.TrimSpace` each item (Go's: Unicode White_Space only, so \\x1c-\\x1f
  survive, unlike Python's `str.strip`), drop empty items; nothing left or any item "void" is
  no device; then internal/config/image/devices.go `NewVisibleDevices`: "none" beats "all",
  "all" beats device ids; anything else is a device id;
- legacy (1.10 and earlier, and nvidia-container-runtime-hook's `getDevicesFromEnvvar` in
  cmd/nvidia-container-runtime-hook/container_config.go): only the *exact* values "", "void"
  (nothing) and "none" (no GPU, driver only) grant nothing; any other text, "all,void" and
  " void" included, goes to nvidia-container-cli as a device list.

So the one set of values that grants nothing on every toolkit is the exact text `NO_DEVICES`;
`grants_devices` answers "may grant" for everything else, which is what admission can promise.
The same parsing covers NVIDIA_IMEX_CHANNELS (`ImexChannelsFromEnvVar`, the same helper) and the
MIG control variables. Keeping to exact literals also makes `$(VAR)` expansion moot: none of them
contains "$", so the kubelet passes them through unchanged.
"""

from __future__ import annotations

from typing import Final

from .vendors import NVIDIA

VISIBLE_DEVICES: Final = NVIDIA.grant_env[0]
IMEX_CHANNELS: Final = "NVIDIA_IMEX_CHANNELS"
MIG_CONFIG: Final = "NVIDIA_MIG_CONFIG_DEVICES"
MIG_MONITOR: Final = "NVIDIA_MIG_MONITOR_DEVICES"

# Every variable of the toolkit that hands a container device nodes: the GPUs themselves, IMEX
# channels (nvidia-container-cli --imex-channel: host-side mknod of
# /dev/nvidia-caps-imex-channels/channelN), and MIG's config/monitor capabilities (control of
# every MIG device of a GPU; the toolkit wants CAP_SYS_ADMIN for them, checked here all the same).
# The gated variables (internal/modifier/cdi.go gatedDevices, applied in legacy, csv and jit-cdi
# modes to a container that has any visible device): `enabled` adds every node of that kind on
# the host (every NVSwitch, every InfiniBand HCA and rdma_cm, every nvidia-fs, gdrdrv), devices
# no plugin allocated.
GATED: Final = ("NVIDIA_GDS", "NVIDIA_MOFED", "NVIDIA_GDRCOPY", "NVIDIA_NVSWITCH")
GRANTING: Final = (VISIBLE_DEVICES, IMEX_CHANNELS, MIG_CONFIG, MIG_MONITOR, *GATED)

# The values that grant nothing on every toolkit version (see the module docstring).
NO_DEVICES: Final = NVIDIA.no_devices

# The capability names the toolkit treats as "privileged" (it checks CAP_SYS_ADMIN in the
# bounding set; Kubernetes accepts names with or without the CAP_ prefix, in any case).
PRIVILEGED_CAPS: Final = frozenset({"SYS_ADMIN", "CAP_SYS_ADMIN", "ALL", "CAP_ALL"})


def grants_devices(value: str) -> bool:
    """Whether a device-list variable set to `value` may hand the container devices on some
    toolkit version: everything but the exact literals of NO_DEVICES."""
    return value not in NO_DEVICES


def privileged_capability(cap: str) -> bool:
    """Whether `cap` names a privileged capability, trimmed and in any case (Unicode's: str.upper
    maps U+0131, dotless i, to I and U+017F, long s, to S, so cel.upper_pattern takes those too)."""
    return cap.strip().upper() in PRIVILEGED_CAPS


def prefix_reaches(prefix: str) -> tuple[str, ...]:
    """The granting variables an envFrom with `prefix` can set: a ConfigMap or Secret key K
    becomes the variable prefix+K, and keys are any printable text, so the prefix rules a name
    out only when the name does not start with it."""
    return tuple(name for name in GRANTING if name.startswith(prefix))
