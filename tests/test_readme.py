"""The README's promises, checked: its curl example, its rule table and its config reference."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.helpers import Server
from webhook.config import DEFAULTS, from_mapping
from webhook.policy import RULE_IDS
from webhook.policy.registry import MUTATIONS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
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


def test_every_rule_and_mutation_is_documented() -> None:
    section = README.split("## Policy reference", 1)[1].split("## Configuration reference", 1)[0]
    documented = re.findall(r"^\| `([a-z-]+)` [|(]", section, flags=re.M)
    assert documented == [*RULE_IDS, *(m.id for m in MUTATIONS)]


def test_config_reference_is_the_real_default() -> None:
    block = README.split("## Configuration reference", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    documented = yaml.safe_load(block)
    assert documented == json.loads(json.dumps(DEFAULTS))
    from_mapping(documented, environ={})


def test_every_yaml_and_json_example_parses() -> None:
    """Readers paste these: every ```yaml / ```json block, and every flow-style example in a
    `# [...]` or `# {...}` comment, must load."""
    blocks = re.findall(r"```(yaml|json)\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 1
    for lang, body in blocks:
        if lang == "json":
            json.loads(body)
        else:
            list(yaml.safe_load_all(body))
    examples = re.findall(r"#[^\n]*?(\[\{.*?\}\])", README)
    assert examples, "the customResources example"
    for text in examples:
        assert isinstance(yaml.safe_load(text), list), text
