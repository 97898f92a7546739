"""How the NVIDIA container toolkit reads the variables and capabilities we police.

Mirrors internal/config/image (cuda_image.go, devices.go, privileged.go) of
nvidia-container-toolkit so our verdicts match what the runtime will actually do.
"""

from __future__ import annotations

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"

# The capability names the toolkit treats as "privileged" (it checks CAP_SYS_ADMIN in the
# bounding set; Kubernetes accepts names with or without the CAP_ prefix, in any case).
_PRIVILEGED_CAPS = frozenset({"SYS_ADMIN", "CAP_SYS_ADMIN", "ALL", "CAP_ALL"})


def grants_devices(value: str) -> bool:
    """True when NVIDIA_VISIBLE_DEVICES=`value` hands the container one or more GPUs.

    The toolkit splits on commas, trims, drops empty items; any `void` (or nothing left)
    means no devices; otherwise the first keyword in order decides (`0,all` is all,
    `none,all` is none); a list without keywords names devices. Keywords are
    case-sensitive: `ALL` is a device id, and a device id still grants a device.
    """
    items = [item.strip() for item in value.split(",")]
    items = [item for item in items if item]
    if not items or "void" in items:
        return False
    for item in items:
        if item == "all":
            return True
        if item == "none":
            return False
    return True


def privileged_capability(cap: str) -> bool:
    return cap.strip().upper() in _PRIVILEGED_CAPS
