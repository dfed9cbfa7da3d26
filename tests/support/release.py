"""Helpers for the release tests (tests/release): paths, a clean environment, schema loading."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "tests" / "release" / "schemas"
ACTION = REPO / "action.yml"
HOOKS = REPO / ".pre-commit-hooks.yaml"
WORKFLOWS = sorted((REPO / "examples").glob("github-workflow-*.yml"))
RELEASE_REQUIREMENTS = REPO / "requirements" / "release.txt"
RELEASE_LOCK = REPO / "lockfiles" / "release.lock"
PINNED_USES = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: GitHub reads `on:` as the key "on", not True."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_yaml(path: Path) -> Any:
    """Parse a GitHub/pre-commit YAML file the way those tools do (YAML 1.2 booleans)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Yaml12Loader)  # noqa: S506


def load_schema(name: str) -> dict[str, Any]:
    """One of the checked-in SchemaStore schemas (see schemas/SOURCES.md)."""
    return json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))


def unpinned_uses(document: Any) -> list[str]:
    """Every `uses:` value that is not `owner/repo[/path]@<40-hex commit>` (local `./` allowed)."""
    found: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key == "uses" and isinstance(value, str):
                if not value.startswith("./") and not PINNED_USES.match(value):
                    found.append(value)
            else:
                found.extend(unpinned_uses(value))
    elif isinstance(document, list):
        for item in document:
            found.extend(unpinned_uses(item))
    return found


def action_step(step_id: str) -> dict[str, Any]:
    """The step of action.yml with this `id`."""
    steps = load_yaml(ACTION)["runs"]["steps"]
    return next(step for step in steps if step.get("id") == step_id)


def run_action_step(
    step_id: str,
    inputs: dict[str, str],
    env: dict[str, str],
    cwd: Path,
    overrides: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one `shell: bash` step of action.yml as the runner does (`bash -e {0}`).

    The step's `env:` values are `${{ inputs.NAME }}` or `${{ github.action_path }}`-style
    expressions; `inputs` gives each input's value (defaults from action.yml otherwise) and
    `env` the runner's variables (GITHUB_OUTPUT, PATH, ...) and the expression contexts
    (`github.action_path`, `runner.temp`, `steps.python.outputs.python-path`); `overrides`
    replaces step variables after that.
    """
    step = action_step(step_id)
    assert step["shell"] == "bash"
    defaults = {name: spec.get("default", "") for name, spec in load_yaml(ACTION)["inputs"].items()}
    values = {**defaults, **inputs}
    step_env: dict[str, str] = {}
    for name, value in step.get("env", {}).items():
        text = str(value)
        text = re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: values[m[1]], text)
        text = re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", lambda m: env[m[1]], text)
        step_env[name] = text
    step_env.update(overrides or {})
    script = cwd / f"{step_id}.sh"
    script.write_text(step["run"], encoding="utf-8")
    full_env = {k: v for k, v in env.items() if "." not in k}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", str(script)],
        cwd=cwd, env={**full_env, **step_env}, capture_output=True, text=True, timeout=600,
    )


def wheelhouse() -> Path:
    """The folder `make wheelhouse` fills with release.txt's wheels (DFLASH_GUARD_WHEELHOUSE)."""
    folder = Path(os.environ.get("DFLASH_GUARD_WHEELHOUSE", REPO / ".wheelhouse"))
    names = re.findall(r"^([A-Za-z0-9][\w.]*)==(\S+) ", RELEASE_REQUIREMENTS.read_text(), re.M)
    present = {wheel.name.split("-")[0].lower() for wheel in folder.glob("*.whl")}
    missing = [name for name, _ in names if name.lower() not in present]
    if missing:
        pytest.fail(
            f"{folder} lacks the wheels of {', '.join(missing[:5])}{'...' if missing[5:] else ''}: "
            "run `make wheelhouse` (it downloads release.txt's wheels, checking each hash) or "
            "point DFLASH_GUARD_WHEELHOUSE at a folder that has them",
            pytrace=False,
        )
    return folder


def clean_env(**extra: str) -> dict[str, str]:
    """The environment minus PYTHONPATH and pip settings, so nothing leaks from this checkout."""
    env = {
        k: v for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.startswith(("PIP_", "VIRTUAL_ENV"))
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **extra}
