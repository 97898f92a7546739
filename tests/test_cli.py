"""`gpu-policy check` / `mutate` / `certs` through a real subprocess, as CI would run them."""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import container, pod, wrap

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args], input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def write(path: Path, *docs: object) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_clean_manifest_exits_0(tmp_path: Path) -> None:
    f = write(tmp_path / "ok.yaml", wrap(pod(container(gpu=1)), "Deployment"), pod(container()))
    r = cli("check", "-f", str(f))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("2 objects: 2 clean")


def test_violation_exits_1_with_server_message(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.yaml", pod(container()), wrap(pod(container("t", gpu="1.5")), "CronJob"))
    r = cli("check", "-f", str(f))
    assert r.returncode == 1
    assert f"DENY  {f} (document 2): CronJob ml/w: violates GPU policy:" in r.stdout
    assert (
        '      - gpu-quantity (container "t": spec.jobTemplate.spec.template.spec.containers[0].resources'
        '.limits["nvidia.com/gpu"] is "1.5"' in r.stdout
    )


def test_json_output_and_list_kind(tmp_path: Path) -> None:
    lst = {"apiVersion": "v1", "kind": "List", "items": [pod(container()), pod(container(gpu=1, privileged=True))]}
    f = tmp_path / "list.json"
    f.write_text(json.dumps(lst))
    r = cli("check", "-f", str(f), "-o", "json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert [x["where"] for x in out["results"]] == [f"{f} (document 1, items[0])", f"{f} (document 1, items[1])"]
    assert out["results"][1]["violations"][0]["rule"] == "no-privileged-gpu"
    assert out["results"][1]["message"].startswith("violates GPU policy: no-privileged-gpu")
    assert out["exitCode"] == 1


def test_unusable_input_exits_2_naming_file_and_document(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text(yaml.safe_dump(pod(container())) + "---\nkind: [unclosed\n")
    r = cli("check", "-f", str(f))
    assert r.returncode == 2
    assert f"ERROR {f} (document 2): not valid YAML at line" in r.stdout
    bad = pod(container())
    bad["spec"]["containers"] = "nope"
    g = write(tmp_path / "shape.yaml", bad)
    r = cli("check", "-f", str(g))
    assert r.returncode == 2
    assert f"{g} (document 1)" in r.stdout and "spec.containers must be a list, got string" in r.stdout
    r = cli("check", "-f", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "cannot read" in r.stdout
    h = tmp_path / "scalar.yaml"
    h.write_text("just a string\n")
    r = cli("check", "-f", str(h))
    assert r.returncode == 2 and "expected an object, got str" in r.stdout


def test_folder_and_stdin(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "a.yml", pod(container()))
    write(tmp_path / "b.yaml", pod(container(gpu="-1")))
    (tmp_path / "notes.txt").write_text("ignored")
    r = cli("check", "-f", str(tmp_path))
    assert r.returncode == 1 and "2 objects: 1 denied, 1 clean" in r.stdout
    r = cli("check", "-f", "-", stdin=yaml.safe_dump(pod(container(gpu=1))))
    assert r.returncode == 0


def test_config_is_honoured_and_validated(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("rules:\n  gpu-quantity: warn\n")
    f = write(tmp_path / "p.yaml", pod(container(gpu="1.5")))
    r = cli("check", "-f", str(f), "--config", str(cfg))
    assert r.returncode == 0 and "WARN" in r.stdout and "would violate GPU policy: gpu-quantity" in r.stdout
    cfg.write_text("rulez: {}\n")
    r = cli("check", "-f", str(f), "--config", str(cfg))
    assert r.returncode == 2 and f"{cfg}: rulez: unknown key (did you mean rules?)" in r.stderr


def test_exempt_namespace_is_skipped(tmp_path: Path) -> None:
    # The chart's excluded namespaces (gpu-operator included) are the CLI's defaults too.
    for ns in ("kube-system", "gpu-operator"):
        f = write(tmp_path / "p.yaml", pod(container(gpu="1.5"), namespace=ns))
        assert cli("check", "-f", str(f)).returncode == 0
    unset = pod(container(gpu="1.5"))
    del unset["metadata"]["namespace"]
    f = write(tmp_path / "unset.yaml", unset)
    assert cli("check", "-f", str(f), "-n", "kube-system").returncode == 0  # -n fills a missing namespace
    assert cli("check", "-f", str(f), "-n", "ml").returncode == 1


def test_namespace_flag_never_overrides_an_explicit_namespace(tmp_path: Path) -> None:
    """kubectl refuses `-n kube-system` for an object declared in another namespace; so do we,
    or `-n kube-system` would skip a privileged GPU StatefulSet declared for `ml`."""
    f = write(tmp_path / "s.yaml", wrap(pod(container(gpu=1, privileged=True)), "StatefulSet"))
    r = cli("check", "-f", str(f), "-n", "kube-system")
    assert r.returncode == 2
    assert (
        'the namespace from the provided object "ml" does not match the namespace "kube-system". '
        "You must pass '--namespace=ml' to perform this operation." in r.stdout
    )
    assert cli("check", "-f", str(f), "-n", "ml").returncode == 1
    r = cli("mutate", "-f", str(f), "-n", "kube-system")
    assert r.returncode == 2 and "does not match" in r.stderr


def test_mutate_prints_patched_objects(tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", pod(container("t", gpu=1)), wrap(pod(container(gpu=1)), "Deployment"))
    r = cli("mutate", "-f", str(f), "--cluster-version", "v1.19.10-r0-CCE21.11.1.B006")
    assert r.returncode == 0, r.stderr
    mutated, deployment = list(yaml.safe_load_all(r.stdout))
    assert mutated["spec"]["containers"][0]["env"] == [
        {"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"},  # a GPU container: nothing of AMD's
    ]
    assert "env" not in deployment["spec"]["template"]["spec"]["containers"][0]
    assert "injected LD_LIBRARY_PATH" in r.stderr
    r = cli("mutate", "-f", str(f), "--cluster-version", "1.28")
    assert "LD_LIBRARY_PATH" not in r.stdout
    r = cli("mutate", "-f", str(f), "--cluster-version", "someday")
    assert r.returncode == 2 and "--cluster-version" in r.stderr


def test_certs_command(tmp_path: Path) -> None:
    out = tmp_path / "c"
    r = cli("certs", "--out", str(out), "--service", "svc", "--namespace", "ns", "--host", "127.0.0.1")
    assert r.returncode == 0, r.stderr
    assert "svc.ns.svc.cluster.local" in r.stdout
    for name in ("tls.key", "ca.key"):
        assert stat.S_IMODE(os.stat(out / name).st_mode) == 0o600
    r = cli("certs", "--out", str(out))
    assert r.returncode == 2 and "pass --force" in r.stderr
    assert cli("certs", "--out", str(out), "--force").returncode == 0


PIPELINE = {
    "apiVersion": "workflows.example.com/v1",
    "kind": "Pipeline",
    "metadata": {"name": "p", "namespace": "ml"},
    "spec": {"steps": [{"name": "train", "pod": {"spec": {"containers": [container("t", gpu="1.5")]}}}]},
}


def test_skips_say_why_and_gpu_bearing_unknown_kinds_are_never_a_bare_skip(tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"}, "data": {}}
    exempt = pod(container(gpu="1.5"), namespace="kube-system")
    f = write(tmp_path / "m.yaml", cm, PIPELINE, exempt)
    r = cli("check", "-f", str(f))
    assert r.returncode == 0, r.stdout
    assert f"SKIP  {f} (document 1): ConfigMap ml/c: kind not policed" in r.stdout
    assert f"SKIP  {f} (document 3): Pod kube-system/p: namespace exempt (exemptNamespaces)" in r.stdout
    notice = (
        "gpu-policy does not police Pipeline (workflows.example.com), which requests GPUs at "
        "spec.steps[0].pod.spec.containers[0]; judge it with customResources: "
        "[{group: workflows.example.com, kind: Pipeline, templates: ['spec.steps[*].pod']}]"
    )
    assert f"WARN  {f} (document 2): Pipeline ml/p: {notice}" in r.stdout
    assert cli("check", "-f", str(f), "--strict").returncode == 1
    out = json.loads(cli("check", "-f", str(f), "-o", "json").stdout)
    assert [x["reason"] for x in out["results"]] == [
        "kind not policed",
        "kind not policed, but it requests GPUs",
        "namespace exempt (exemptNamespaces)",
    ]
    # The suggested entry, pasted into a config, makes the kind judged.
    suggested = yaml.safe_load(notice.split("customResources: ", 1)[1])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"customResources": suggested}))
    r = cli("check", "-f", str(f), "--config", str(cfg))
    assert r.returncode == 1 and "spec.steps[0].pod.spec.containers[0].resources.limits" in r.stdout


# ---------------------------------------------------------------- the CLI as kubectl and kubeconform users expect it


def test_bare_command_prints_help_and_exits_0() -> None:
    r = cli()
    assert r.returncode == 0 and r.stdout.startswith("usage: gpu-policy") and "check" in r.stdout
    assert "run `gpu-policy COMMAND --help`" in r.stdout


def test_every_option_explains_itself_and_every_command_has_examples_and_exit_codes() -> None:
    from webhook.cli import parser

    top = parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in {"gpu-policy": top, **commands}.items():
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help text"
        if name != "gpu-policy":
            help_text = sub.format_help()
            assert "examples:\n  gpu-policy" in help_text and "exit codes:\n  0" in help_text, name
    assert "(default: 8443)" in commands["serve"].format_help()
    assert "(default: gpu-policy)" in commands["certs"].format_help()


def test_the_readme_commands_table_names_every_option() -> None:
    """Each command's row(s) in the README name exactly the options its parser has."""
    import re

    from webhook.cli import parser

    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Commands", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, set[str]] = {}
    for row in table.splitlines():
        cell = row.split("` |", 1)[0]
        m = re.match(r"\| `gpu-policy (\w+)", cell)
        name = m[1] if m and m[1] != "COMMAND" else "gpu-policy" if cell.startswith("| `gpu-policy [") else None
        if name is not None:
            documented.setdefault(name, set()).update(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", cell))
    top = parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, sub in {"gpu-policy": top, **commands}.items():
        options = {
            o
            for a in sub._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
            for o in a.option_strings
        }
        shown = documented.get(name, set())
        missing = {o for o in options if o not in shown and not any(o2 in shown for o2 in _spellings(sub, o))}
        assert not missing, f"README's commands table lacks {sorted(missing)} of {name}"
        assert not shown - options - {"-h"}, f"README's commands table names {sorted(shown - options)} for {name}"


def _spellings(sub: argparse.ArgumentParser, option: str) -> list[str]:
    """The other spellings of `option` (-o and --output are one option: naming one is enough)."""
    return next((a.option_strings for a in sub._actions if option in a.option_strings), [])


def test_counts_read_as_english_and_verbose_lists_clean_objects(tmp_path: Path) -> None:
    f = write(tmp_path / "one.yaml", pod(container(gpu=1), name="ok"))
    r = cli("check", str(f))  # a file as a positional argument, as pre-commit passes it
    assert r.returncode == 0 and r.stdout == "1 object: 1 clean\n"
    r = cli("check", "-v", str(f))
    assert r.stdout == f"OK    {f} (document 1): Pod ml/ok\n1 object: 1 clean\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    # A document that is no object is not "1 object: 1 error" (issue 34): nothing was judged.
    assert cli("check", str(bad)).stdout.endswith("0 objects; 1 unusable input\n")
    r = cli("check", str(bad), str(f), str(bad), str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and r.stdout.endswith("1 object: 1 clean; 3 unusable inputs\n")
    # An object whose fields are wrong is an object in error; one only audited is "audited", not warned.
    broken = write(tmp_path / "broken.yaml", pod({"name": "a", "image": "b", "env": "not a list"}, name="b"))
    assert cli("check", str(broken)).stdout.endswith("1 object: 1 error\n")
    config = tmp_path / "audit.yaml"
    config.write_text("rules:\n  gpu-quantity: audit\n")
    audited = write(tmp_path / "audited.yaml", pod(container(gpu="1.5"), name="c"))
    r = cli("check", "--config", str(config), str(audited))
    assert r.returncode == 0 and r.stdout.endswith("1 object: 1 audited\n") and "AUDIT " in r.stdout


def test_empty_input_is_a_notice_and_fail_on_empty_makes_it_exit_1(tmp_path: Path) -> None:
    empty = tmp_path / "rendered.yaml"
    empty.write_text("---\n# helm rendered nothing\n")
    r = cli("check", "-f", str(empty))
    assert r.returncode == 0 and f"no objects in {empty}: nothing was judged" in r.stderr
    r = cli("check", "--fail-on-empty", "-f", "-", stdin="")
    assert r.returncode == 1 and "no objects in -" in r.stderr
    r = cli("check")
    assert r.returncode == 2 and "no input" in r.stderr


def test_mutate_says_when_the_patched_object_would_still_be_denied(tmp_path: Path) -> None:
    f = write(
        tmp_path / "p.yaml",
        pod(container("t", gpu=1, privileged=True), name="bad"),
        pod(container(image="nginx:1.27"), name="ok"),
    )
    r = cli("mutate", str(f), "--cluster-version", "1.27")
    assert r.returncode == 0 and len(list(yaml.safe_load_all(r.stdout))) == 2
    assert f"DENY  {f} (document 1): Pod ml/bad: the validating webhook would still refuse it: " in r.stderr
    assert "no-privileged-gpu" in r.stderr and "ml/ok" not in r.stderr


def test_junit_report(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    f = write(tmp_path / "m.yaml", pod(container(gpu=1), name="ok"), pod(container("t", gpu="1.5"), name="bad"))
    r = cli("check", "-o", "junit", str(f))
    assert r.returncode == 1
    suite = ET.fromstring(r.stdout)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == [str(f), str(f)]
    failure = cases[1].find("failure")
    assert failure is not None and "gpu-quantity" in (failure.get("message") or "")
    assert "(line " in (failure.text or "")


def test_sarif_validates_against_the_sarif_2_1_0_schema_and_points_at_lines(tmp_path: Path) -> None:
    """The OASIS schema (errata01, vendored in tests/data): what GitHub code scanning ingests."""
    import jsonschema

    manifest = tmp_path / "k8s" / "train.yaml"
    manifest.parent.mkdir()
    manifest.write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: train\n  namespace: ml\nspec:\n  template:\n"
        "    spec:\n      restartPolicy: Never\n      containers:\n        - name: trainer\n"
        "          image: nvcr.io/nvidia/pytorch:24.05-py3\n          env:\n"
        "            - name: NVIDIA_VISIBLE_DEVICES\n              value: all\n          resources:\n"
        '            limits:\n              nvidia.com/gpu: "1.5"\n---\nnot: [valid\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "webhook", "check", "-o", "sarif", "k8s/train.yaml"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    log = json.loads(r.stdout)
    schema = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.Draft4Validator(schema).validate(log)
    run = log["runs"][0]
    rules = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    found = {
        (x["ruleId"], x["level"], x["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
         x["locations"][0]["physicalLocation"]["region"]["startLine"])
        for x in run["results"]
    }  # fmt: skip
    assert found == {
        ("gpu-quantity", "error", "k8s/train.yaml", 18),
        ("no-visible-devices-env", "error", "k8s/train.yaml", 14),
        # Where the YAML error is, as its message says (issue 34: it was line 1).
        ("unusable-manifest", "error", "k8s/train.yaml", 21),
    }
    (unusable,) = [x for x in run["results"] if x["ruleId"] == "unusable-manifest"]
    assert "at line 21," in unusable["message"]["text"]
    assert all(rules[x["ruleIndex"]] == x["ruleId"] for x in run["results"])
    paths = [x["locations"][0].get("logicalLocations", [{}])[0].get("fullyQualifiedName") for x in run["results"]]
    assert 'Job/ml/train:spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]' in paths


def test_the_pre_commit_hook_runs_check_on_the_files_it_is_given(tmp_path: Path) -> None:
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "gpu-policy-check" and hook["pass_filenames"] is True and hook["language"] == "python"
    good = write(tmp_path / "a.yaml", pod(container(gpu=1)))
    bad = write(tmp_path / "b.yaml", pod(container(gpu=1, privileged=True)))
    entry = hook["entry"].split()
    assert entry[:2] == ["gpu-policy", "check"]
    assert cli(*entry[1:], str(good)).returncode == 0
    r = cli(*entry[1:], str(good), str(bad))
    assert r.returncode == 1 and "no-privileged-gpu" in r.stdout


def test_the_pre_commit_hook_as_pre_commit_runs_it(tmp_path: Path) -> None:
    """Issue 34: the hook passes every staged YAML/JSON file (types_or, no `files:`), so a chart's
    values.yaml, Chart.yaml and templates reach `check`. Issue 51: they are no longer skipped but
    rendered, once per chart, by helm with the hook's --chart-values, and what they render is
    judged. Emulated as pre-commit runs it: the hook's entry, with the files its types select."""
    import shlex

    from tests.chart import helm_binary

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert set(hook["types_or"]) == {"yaml", "json"} and hook["pass_filenames"]
    chart = ROOT / "charts" / "gpu-policy"
    staged = [
        *sorted(chart.glob("*.yaml")),
        *sorted((chart / "templates").glob("*.yaml")),
        ROOT / "tests" / "corpus" / "clean-gpu-pod.yaml",
    ]
    entry = shlex.split(hook["entry"])
    assert entry[0] == "gpu-policy"
    ours = tmp_path / "ours.yaml"  # our own chart renders only with an image (or the placeholder allowed)
    ours.write_text("image: {allowPlaceholder: true}\n")

    def run(files: list[Path], *args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "webhook", *entry[1:], *args, *map(str, files)]
        env = {**os.environ, "HELM": os.path.abspath(helm_binary())}
        return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False, env=env)

    clean = run(staged, "--chart-namespace", "gpu-policy", "--chart-values", str(ours), "-v")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "charts/gpu-policy/templates/deployment.yaml (document 1): Deployment gpu-policy/check" in clean.stdout
    assert clean.stdout.count("clean-gpu-pod.yaml") == 1
    denied = run([*staged, ROOT / "tests" / "corpus" / "envfrom-gpu.yaml"], "--chart-namespace", "gpu-policy",
                 "--chart-values", str(ours))  # fmt: skip
    assert denied.returncode == 1 and "envfrom-gpu.yaml" in denied.stdout
    # Our chart refuses the default namespace (and the placeholder image): unusable input, in helm's words.
    bare = run(staged)
    assert (
        bare.returncode == 2 and "helm template failed: Error: execution error at (gpu-policy/templates/" in bare.stdout
    )
    # Without the hook's flag, a values file alone is still unusable input.
    lone = subprocess.run(
        [sys.executable, "-m", "webhook", "check", str(ROOT / "tests" / "corpus" / "clean-gpu-pod.yaml"),
         str(tmp_path / "values.yaml")], capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert lone.returncode == 2


def scratch_chart(root: Path) -> Path:
    """A team's chart whose values can set NVIDIA_VISIBLE_DEVICES (empty by default)."""
    chart = root / "deploy" / "trainer"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: trainer\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text('visibleDevices: ""\n')
    (chart / "templates" / "deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}-trainer\nspec:\n"
        "  selector: {matchLabels: {app: t}}\n  template:\n    metadata: {labels: {app: t}}\n    spec:\n"
        "      containers:\n        - name: train\n          image: nvcr.io/nvidia/pytorch:24.05-py3\n"
        "          {{- with .Values.visibleDevices }}\n          env:\n            - name: NVIDIA_VISIBLE_DEVICES\n"
        "              value: {{ . | quote }}\n          {{- end }}\n"
    )
    (chart / "templates" / "service.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  ports: [{port: 80}]\n"
    )
    return chart


def test_a_chart_is_checked_where_it_lives(tmp_path: Path) -> None:
    """Issue 51, item 2: `check <chart folder>` (or any file the chart is made of, as the hook
    passes them) renders it with helm and its values files, and each result names the template
    file: a values file that sets NVIDIA_VISIBLE_DEVICES=all is denied at templates/deployment.yaml,
    in text and in SARIF (the repository-relative path code scanning places). From a pipe, the
    template helm names (`# Source:`) stands in for `<stdin>`. Without helm: exit 2, saying so."""
    from tests.chart import helm_binary

    chart = scratch_chart(tmp_path)
    prod = tmp_path / "deploy" / "prod.yaml"
    prod.write_text("visibleDevices: all\n")
    env = {**os.environ, "HELM": os.path.abspath(helm_binary())}

    def check(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "webhook", "check", *args], capture_output=True, text=True, cwd=tmp_path,
            env=kw.get("env", env), input=kw.get("input"),
        )  # fmt: skip

    assert check("deploy/trainer").returncode == 0
    denied = check("deploy/trainer/values.yaml", "--chart-values", "deploy/prod.yaml")
    assert denied.returncode == 1, denied.stdout + denied.stderr
    assert "deploy/trainer/templates/deployment.yaml (document 1): Deployment default/check-trainer" in denied.stdout
    assert "no-visible-devices-env" in denied.stdout
    sarif = json.loads(check("deploy", "--chart-values", "deploy/prod.yaml", "-o", "sarif").stdout)
    (result,) = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "no-visible-devices-env"]
    location = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert location == "deploy/trainer/templates/deployment.yaml", location
    rendered = subprocess.run(
        [helm_binary(), "template", "t", str(chart), "--values", str(prod)], capture_output=True, text=True, check=True
    ).stdout
    piped = check("-f", "-", "-o", "json", input=rendered)
    assert piped.returncode == 1
    assert [r["where"] for r in json.loads(piped.stdout)["results"]] == [
        "trainer/templates/service.yaml (document 1)",
        "trainer/templates/deployment.yaml (document 1)",
    ]
    nowhere = check("deploy/trainer", env={k: v for k, v in env.items() if k != "HELM"} | {"PATH": "/nonexistent"})
    assert nowhere.returncode == 2 and "judging it needs helm" in nowhere.stdout


def test_check_tells_warnings_whole_where_the_webhook_cuts_them() -> None:
    """Issue 34: the API server keeps 256 characters of a warning, so the webhook cuts its own;
    `check` cut them offline too. The CLI prints each whole, with its fix."""
    from tests.apiserver import ApiServer
    from tests.helpers import corpus
    from webhook.admission import validate
    from webhook.admission.review import parse
    from webhook.config import default_policy

    obj = corpus()["dcgm-exporter-daemonset.yaml"]
    served = validate(parse(ApiServer.build(obj)), default_policy()).warnings
    assert served and all(len(w) <= 256 and "; fix: " not in w for w in served)  # the short form
    r = cli("check", str(ROOT / "tests" / "corpus" / "dcgm-exporter-daemonset.yaml"))
    told = [line for line in r.stdout.splitlines() if line.startswith("WARN ")]
    assert told and any(len(line) > 300 and "; fix: " in line for line in told)


def test_serve_says_serving_only_once_it_listens(cert_dir: Path) -> None:
    """Issue 34: `serve` logged "serving https://…" before the bind failed. A port already taken:
    the error names it, exit 2, and no line says it is serving."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "webhook", "serve", "--cert-dir", str(cert_dir), "--host", "127.0.0.1",
             "--port", str(port), "--metrics-port", "0", "--cluster-version", "1.30"],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )  # fmt: skip
    assert r.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert "serving https" not in r.stdout + r.stderr and "starting https" in r.stdout + r.stderr


def test_serve_refuses_zero_workers_before_it_starts(cert_dir: Path) -> None:
    """`--workers 0` is an input error (exit 2) named at once, not after a "starting" line."""
    r = subprocess.run(
        [sys.executable, "-m", "webhook", "serve", "--cert-dir", str(cert_dir), "--workers", "0",
         "--cluster-version", "1.30"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2
    assert "--workers must be at least 1" in r.stderr and "starting" not in r.stdout + r.stderr


def test_mutate_says_a_workload_is_printed_unchanged() -> None:
    """Issue 34: `mutate` on a Deployment printed it unchanged without a word."""
    r = cli("mutate", str(ROOT / "tests" / "corpus" / "clean-deployment.yaml"))
    assert r.returncode == 0
    assert "NOTE " in r.stderr and "printed unchanged: only Pods are mutated" in r.stderr
    assert "NOTE " not in cli("mutate", str(ROOT / "tests" / "corpus" / "clean-gpu-pod.yaml")).stderr


def test_the_cli_runs_without_the_fast_extra(tmp_path: Path) -> None:
    """Issue 51: `pip install gpu-policy` (no `fast` extra) runs check, audit's and verify's modules:
    orjson is an optional speed-up everywhere, the cluster package included. (Checked by hand with a
    plain `pip install .` in a fresh venv; here the import is blocked in a subprocess.)"""
    import sys

    f = write(tmp_path / "p.yaml", pod(container("t", gpu=1, privileged=True), name="bad"))
    script = (
        "import sys; sys.modules['orjson'] = None\n"
        "import webhook.cluster.client, webhook.cluster.reflector, webhook.cluster.probes, webhook.cluster.verify\n"
        "from webhook.cli import main\n"
        f"sys.exit(main(['check', '-f', {str(f)!r}]))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 1 and "no-privileged-gpu" in r.stdout, r.stderr
