"""Issue 34: modules by concern. A helper two modules share is public in the module that owns it;
no module imports another's private name (rules' independence and the layers inside the policy
core are import-linter contracts in pyproject.toml)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_private_name_is_imported_across_modules() -> None:
    found = []
    for path in sorted((ROOT / "webhook").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            ours = node.level > 0 or (node.module or "").startswith("webhook")
            if not ours:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name} from {node.module}")
    assert found == [], "\n".join(found)
