"""The raw-body screen: answer most reviews without parsing more than the envelope needs.

An object that contains none of the enabled rules' (or mutations') trigger texts cannot
violate them, so it is allowed without being walked. The texts come from the registry
(`Rule.triggers`); this module only knows how each kind of trigger is spelled in the JSON
the API server sends. Conservative by construction: any escape sequence sends the body
down the full path, since `\\u0041` or `\\/` could spell a trigger differently.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from .policy import ALL_RULES, MUTATIONS, Mode, Policy, Trigger, Where

# Any backslash in JSON text starts an escape; Go's encoder (the API server's) writes them
# only for control characters, <, > and &. One memchr-speed check beats scanning for each form.
ESCAPE: Final = b"\\"


def tokens(trigger: Trigger, policy: Policy) -> tuple[bytes, ...]:
    """Bytes of which every body holding `trigger` contains at least one. Label keys are matched
    with their quotes, so `accelerator` does not match every body mentioning the word."""
    if trigger.where is Where.EVERY_POD:
        return (b"",)  # in every body
    values = trigger.values(policy)
    if trigger.where in (Where.NODE_LABEL, Where.RUNTIME_CLASS, Where.GPU_COUNT):
        return tuple(f'"{v}"'.encode() for v in values)
    if trigger.where is Where.GPU_RESOURCE:
        # A name matching "nvidia.com/*.shared" contains both literal parts: the longer skips further.
        return tuple(max(v.split("*"), key=len).encode() for v in values)
    return tuple(v.encode() for v in values)


def _tokens(triggers: Iterable[Trigger], policy: Policy) -> tuple[bytes, ...]:
    # Registry order, first occurrence kept: the GPU resource name comes first, and most
    # bodies that concern us contain it, so the scan usually stops after one token.
    found = tuple(dict.fromkeys(t for trigger in triggers for t in tokens(trigger, policy)))
    # Every token costs a full scan of each body that holds none (about 3 us for 7 KB): a body
    # that holds a token holds any part of it, so tokens sharing an anchor are scanned once, as
    # the anchor. A superset, never a miss; the few extra bodies sent down the full path are
    # judged exactly as before.
    anchored = tuple(dict.fromkeys(next((a for a in ANCHORS if a in t), t) for t in found))
    return tuple(t for t in anchored if not any(o != t and o in t for o in anchored))


# Parts shared by many tokens and rare in pods that concern no rule: `gpu` stands for `"gpu"`,
# volcano.sh/gpu-*, KAI's gpu-fraction and gpu-memory; `device` for the DRA extended-resource
# prefix and GKE's device annotation. 9 scans instead of 13 for a body that holds none (a 7.7 KB
# non-GPU pod: 30 us instead of 40); GPU bodies stop at the first token either way.
ANCHORS: Final = (b"nvidia", b"NVIDIA_", b"accelerator", b"gpu", b"device")


@dataclass(frozen=True, slots=True)
class Screen:
    """Decides from the raw request bytes whether the policy could have anything to say."""

    validate_tokens: tuple[bytes, ...]
    mutate_tokens: tuple[bytes, ...]

    @classmethod
    def for_policy(cls, policy: Policy) -> Screen:
        rules = [t for r in ALL_RULES if policy.mode(r.id) is not Mode.OFF for t in r.triggers]
        mutations = [t for m in MUTATIONS if m.enabled(policy) for t in m.triggers]
        return cls(_tokens(rules, policy), _tokens(mutations, policy))

    @staticmethod
    def _may_matter(body: bytes, tokens: tuple[bytes, ...]) -> bool:
        # An empty token (something that applies to every pod) matches any body; check it first.
        return b"" in tokens or ESCAPE in body or any(t in body for t in tokens)

    def may_validate(self, body: bytes) -> bool:
        return self._may_matter(body, self.validate_tokens)

    def may_mutate(self, body: bytes) -> bool:
        return self._may_matter(body, self.mutate_tokens)
