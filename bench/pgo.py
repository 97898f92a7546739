"""The training run of the profile-guided build (setup.py): reviews through the compiled modules.

GCC's -fprofile-use lays out the compiled modules by what this run executes: hot paths together
and straight-line, error handling and unexecuted code out of the way. That matters more on the
server than in a loop: between two reviews TLS, the kernel and the JSON parser evict the policy's
code from the CPU's caches (in the server the compiled rules cost 2-3x what `bench.core` shows).

The workload is what `make bench` sends (bench.reviews: GPU and non-GPU pods, allowed, denied,
mutated) and, where its YAML reader is installed, the test corpus (every rule firing), through
the real routes' handlers (webhook.serve.server, webhook.serve.answer) when their dependencies are
installed (the transport is aiohttp's, not compiled, so not trained), else through
webhook.admission and webhook.admission.review alone (pyyaml is needed either way: webhook.config builds
the policy). Run as
`python -m bench.pgo` with the freshly built package first on the path; it only executes, it
asserts nothing (the tests judge the build).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

from bench.reviews import bodies

ROUNDS = 150  # about 5 s: enough for stable branch counts, small next to the compile itself
CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"
CONFIG = {"clusterVersion": "1.27", "acceleratorNodeSelector": {"default": "nvidia-t4"}}


def _corpus_reviews() -> list[bytes]:
    """Each corpus object as a CREATE review (rules firing, messages built)."""
    try:
        import yaml
    except ImportError:
        return []
    from webhook.admission.review import dumps

    out: list[bytes] = []
    for path in sorted(CORPUS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            group, _, version = str(doc.get("apiVersion", "v1")).rpartition("/")
            request: dict[str, Any] = {
                "uid": str(uuid.uuid4()),
                "kind": {"group": group, "version": version, "kind": doc.get("kind", "")},
                "resource": {"group": group, "version": version, "resource": "pods"},
                "operation": "CREATE",
                "namespace": "default",
                "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                "object": doc,
            }
            out.append(dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
    return out


def _through_server(reviews: list[bytes]) -> bool:
    """Reviews through the real routes' handlers, as webhook.serve.transport calls them; False when the
    server's dependencies (aiohttp, prometheus-client, pyyaml) are missing."""
    try:
        import yaml

        from webhook.serve import server
        from webhook.serve.reload import activate
    except ImportError:
        return False
    webhook = server.Webhook(activate(yaml.safe_dump(CONFIG).encode()))
    webhook.ready = True
    handlers = [webhook.routes[path].handler for path in ("/validate", "/mutate")]
    for _ in range(ROUNDS):
        for body in reviews:
            for handler in handlers:
                handler("application/json", body)
    return True


def _through_protocol(reviews: list[bytes]) -> None:
    """The protocol layer and the policy alone (a build environment without the server's dependencies)."""
    from webhook import admission
    from webhook.admission import review
    from webhook.config import from_mapping

    policy = from_mapping(CONFIG).policy
    for _ in range(ROUNDS):
        for body in reviews:
            req = review.parse(review.loads(body))
            for decide in (admission.validate, admission.mutate):
                review.dumps(admission.respond(req, decide(req, policy)))


def main() -> int:
    import webhook

    if not webhook.BUILD.startswith("compiled"):
        print(f"bench.pgo: not training a {webhook.BUILD} build", file=sys.stderr)
        return 1
    # The realistic bulk five times over, so it stays the bulk of the profile; the corpus once.
    reviews = list(bodies().values()) * 5 + _corpus_reviews()
    if not _through_server(reviews):
        _through_protocol(reviews)
    return 0


if __name__ == "__main__":
    sys.exit(main())
