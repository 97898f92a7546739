"""The README's and docs' promises, checked: the curl example, the rule tables, the config reference,
and every example a reader would paste."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, Server
from webhook.config import DEFAULTS, from_mapping
from webhook.policy import RULE_IDS
from webhook.policy.registry import MUTATIONS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in (Path(__file__).resolve().parent.parent / "docs").glob("*.md")}
DATA = Path(__file__).resolve().parent / "data"


def test_curl_example_gets_the_documented_verdict(server: Server) -> None:
    api = server.client()
    raw = api.post("/validate", (DATA / "review-gpu-pod.json").read_bytes())
    response = raw.json()["response"]
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["allowed"] is False and response["status"]["code"] == 403
    block = README.split("one message naming every violation:\n\n```\n", 1)[1].split("\n```", 1)[0]
    assert response["status"]["message"] == block.replace("\n", " ")
    api.close()


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl, as the README does")
def test_the_readme_curl_itself_gets_the_verdict_and_leaves_a_clean_log(server: Server) -> None:
    """The README's command as a person runs it: curl closes its TLS connection with close_notify,
    which must be no error in the server's log."""
    command = README.split("the way the API server does:\n\n```sh\n", 1)[1].split("\n```", 1)[0]
    command = command.replace("certs/dev/ca.crt", str(server.cert_dir / "ca.crt")).replace(":8443", f":{server.port}")
    since = server.log.stat().st_size
    done = subprocess.run(["sh", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["response"]["status"]["code"] == 403
    assert not server.log_problems(since)


def test_every_rule_and_mutation_is_documented() -> None:
    section = DOCS["policy.md"].split("## Policy reference", 1)[1]
    documented = re.findall(r"^\| `([a-z-]+)` [|(]", section, flags=re.M)
    assert documented == [*RULE_IDS, *(m.id for m in MUTATIONS)]
    summary = README.split("## Rules", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `([a-z-]+)` \|", summary, flags=re.M) == list(RULE_IDS)


def test_readme_is_a_landing_page_and_its_links_resolve() -> None:
    """At most 300 lines; every relative link from it and the docs points at a file and heading that exist."""
    assert README.count("\n") <= 300
    root = Path(__file__).resolve().parent.parent
    pages = {"README.md": README, **{f"docs/{n}": t for n, t in DOCS.items()}}
    for page, text in pages.items():
        for target in re.findall(r"\]\(([^)#:]+\.md|[^):]*#[^)]+)\)", text):
            file, _, anchor = target.partition("#")
            path = (root / page).parent / file if file else root / page
            assert path.resolve().is_file(), f"{page}: link to {target}"
            if anchor:
                headings = re.findall(r"(?m)^#+ (.+)$", path.read_text())
                slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
                assert anchor in slugs, f"{page}: no heading for #{anchor} in {file or page}"


def test_config_reference_is_the_real_default() -> None:
    block = DOCS["configuration.md"].split("```yaml\n", 1)[1].split("```", 1)[0]
    documented = yaml.safe_load(block)
    assert documented == json.loads(json.dumps(DEFAULTS))
    from_mapping(documented, environ={})


def test_every_yaml_and_json_example_parses() -> None:
    """Readers paste these: every ```yaml / ```json block, and every flow-style example in a
    `# [...]` or `# {...}` comment, must load."""
    everything = "\n".join([README, *DOCS.values()])
    blocks = re.findall(r"```(yaml|json)\n(.*?)```", everything, flags=re.S)
    assert len(blocks) >= 1
    for lang, body in blocks:
        if lang == "json":
            json.loads(body)
        else:
            list(yaml.safe_load_all(body))
    examples = re.findall(r"#[^\n]*?(\[\{.*?\}\])", everything)
    assert examples, "the customResources example"
    for text in examples:
        assert isinstance(yaml.safe_load(text), list), text
