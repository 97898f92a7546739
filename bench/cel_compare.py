"""Optional: the four core rules as one CEL program (cel-cpp through cel-expr-python).

ValidatingAdmissionPolicy-style engines evaluate CEL; this puts a number on that engine for
the same pods, next to the policy core. The program approximates the rules (CEL has no
Kubernetes quantity parser here, so quantities are matched as text): it is a cost
comparison of the allow/deny decision, not a second implementation.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.reviews import pods, wide_pod

PROGRAM = r"""
(has(object.spec.initContainers) ? object.spec.initContainers : []) + object.spec.containers
+ (has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])
).all(c,
  (!has(c.resources) || !has(c.resources.limits) || !('nvidia.com/gpu' in c.resources.limits)
     || string(c.resources.limits['nvidia.com/gpu']).matches('^([0-9]+|0?[.][0-9]+|[0-9]{1,3}m)$'))
  && (!has(c.resources) || !has(c.resources.requests) || !('nvidia.com/gpu' in c.resources.requests)
     || (has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits
         && string(c.resources.requests['nvidia.com/gpu']) == string(c.resources.limits['nvidia.com/gpu'])))
  && (!has(c.env) || c.env.all(e, e.name != 'NVIDIA_VISIBLE_DEVICES'
         || (!has(e.valueFrom) && (!has(e.value) || e.value in ['void', 'none', '']))))
  && (!has(c.securityContext) || (
         !(has(c.securityContext.privileged) && c.securityContext.privileged)
         && !(has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add)
              && c.securityContext.capabilities.add.exists(
                   a, a.upperAscii() in ['SYS_ADMIN', 'CAP_SYS_ADMIN', 'ALL']))))
)
"""


def run(quick: bool = False) -> dict[str, dict[str, float]] | None:
    try:
        from cel_expr_python import cel
        from cel_expr_python.ext.ext_strings import ExtStrings  # upperAscii(), as Kubernetes enables
    except ImportError:
        return None
    env = cel.NewEnv(variables={"object": cel.Type.DYN}, extensions=[ExtStrings()])
    expr = env.compile("(" + PROGRAM.strip())
    out: dict[str, dict[str, float]] = {}
    targets: dict[str, Any] = {**pods(), "wide-20-containers": wide_pod(20)}
    rounds, per_round = (5, 50) if quick else (15, 200)
    for name, obj in targets.items():
        expr.eval(data={"object": obj})
        samples = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            for _ in range(per_round):
                expr.eval(data={"object": obj})
            samples.append((time.perf_counter_ns() - start) / per_round / 1000)
        out[name] = {"median_us": round(statistics.median(samples), 2)}
    return out


if __name__ == "__main__":
    result = run()
    if result is None:
        print("cel-expr-python is not installed (pip install cel-expr-python)")
    else:
        for name, r in result.items():
            print(f"{name:22} {r['median_us']:8.2f} us")
