"""A gate that meets an unreadable input once its checks run (newcomer P5: a truncated drafter
`model.safetensors`, under `--policy dev`, whose scan threshold lets the high findings pass)
refuses with its table and JSON, exit 1; exit 2 stays for usage errors before any check."""

from __future__ import annotations

import json
import shutil


def test_truncated_weights_refuse_with_the_table_and_json(cli, builtin_pair, tmp_path,
                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(builtin_pair.target, tmp_path / "p3" / "target")
    shutil.copytree(builtin_pair.drafter, tmp_path / "p3" / "drafter")
    weights = tmp_path / "p3" / "drafter" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert cli("lock", "--target", "p3/target", "--drafter", "p3/drafter", "-o", "p3.lock",
               "-q").exit_code == 0
    gate = ("gate", "--lock", "p3.lock", "--policy", "dev", "--root", "target=p3/target",
            "--root", "drafter=p3/drafter", "-o", "p3-approval.json", "-q")
    result = cli(*gate, "--format", "json")
    assert result.exit_code == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is False
    [refused] = [c for c in report["checks"] if c["verdict"] == "refused"]
    assert refused["name"] == "difftest"
    assert "model.safetensors: not a readable safetensors file" in refused["reason"]
    text = cli(*gate)
    assert text.exit_code == 1 and "│ difftest" in text.stdout
    assert "REFUSED: difftest: could not check:" in text.stdout + text.stderr
    assert not (tmp_path / "p3-approval.json").exists()
