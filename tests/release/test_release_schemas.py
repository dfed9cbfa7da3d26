"""action.yml, the example workflow and .pre-commit-hooks.yaml against SchemaStore's schemas."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest

from tests.support.release import (
    ACTION,
    HOOKS,
    WORKFLOWS,
    load_schema,
    load_yaml,
    unpinned_uses,
)


def _errors(schema_name: str, document: object) -> list[str]:
    schema = load_schema(schema_name)
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(document)]


def test_there_is_an_example_workflow():
    assert [w.name for w in WORKFLOWS] == ["github-workflow-verify.yml"]


def test_action_matches_the_github_action_schema():
    assert _errors("github-action", load_yaml(ACTION)) == []


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_the_github_workflow_schema(workflow: Path):
    assert _errors("github-workflow", load_yaml(workflow)) == []


def test_hooks_match_the_pre_commit_hooks_schema():
    hooks = load_yaml(HOOKS)
    assert {hook["id"] for hook in hooks} == {
        "dflash-guard-verify", "dflash-guard-policy-check", "dflash-guard-scan"
    }
    assert _errors("pre-commit-hooks", hooks) == []


def test_the_schemas_reject_broken_files():
    """The validation can fail: a composite step without `shell`, a job without `runs-on`, a
    hook without `entry`."""
    action = copy.deepcopy(load_yaml(ACTION))
    del action["runs"]["steps"][1]["shell"]
    assert _errors("github-action", action)

    workflow = copy.deepcopy(load_yaml(WORKFLOWS[0]))
    job = next(iter(workflow["jobs"].values()))
    del job["runs-on"]
    assert _errors("github-workflow", workflow)

    hooks = copy.deepcopy(load_yaml(HOOKS))
    del hooks[0]["entry"]
    assert _errors("pre-commit-hooks", hooks)


def test_yaml_is_read_as_github_reads_it():
    """PyYAML's YAML 1.1 turns the workflow key `on` into True; GitHub's reader does not."""
    assert "on" in load_yaml(WORKFLOWS[0])


@pytest.mark.parametrize("path", [ACTION, *WORKFLOWS], ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit(path: Path):
    assert unpinned_uses(load_yaml(path)) == []


def test_the_pin_check_fires_on_tags_and_short_shas():
    document = {"steps": [
        {"uses": "actions/checkout@v4"},
        {"uses": "github/codeql-action/upload-sarif@8aad20d"},
        {"uses": "actions/setup-python@5fda3b95a4ea91299a34e894583c3862153e4b97"},
        {"uses": "./local-action"},
    ]}
    assert unpinned_uses(document) == ["actions/checkout@v4",
                                       "github/codeql-action/upload-sarif@8aad20d"]


def test_workflow_uploads_the_scan_sarif():
    workflow = load_yaml(WORKFLOWS[0])
    steps = [step for job in workflow["jobs"].values() for step in job.get("steps", [])]
    scans = [s for s in steps if s.get("with", {}).get("command") == "scan"]
    upload = "github/codeql-action/upload-sarif@"
    uploads = [s for s in steps if s.get("uses", "").startswith(upload)]
    assert scans and uploads
    assert uploads[0]["with"]["sarif_file"] == scans[0]["with"]["sarif"]
