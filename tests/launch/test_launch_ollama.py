"""`launch ollama` writes the Modelfile serving the lock; `launch --check ollama MODELFILE` lints
one read with ollama's grammar. A written Modelfile passes its own lint; an unlocked GGUF, a
registry name, an ADAPTER, a changed template or an unlisted PARAMETER is refused (exit 1); a
file ollama would not parse is an input error (exit 2). No ollama binary runs here
(docs/limits.md)."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import pytest

from dflash_guard.launch.ollama_modelfile import parse
from dflash_guard.pins.resolve import build_lock
from tests.support.hostile import one_line_error
from tests.support.launch import LAUNCH
from tests.support.trust import write_lock, write_policy


def write_gguf(path: Path, arch: str, **strings: str) -> Path:
    """A small GGUF of architecture `arch`, with string keys `strings`."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), arch)
    for key, value in strings.items():
        writer.add_string(key, value)
    writer.add_tensor("t", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


TEMPLATE = "{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}<|assistant|>"


@pytest.fixture
def pair(tmp_path: Path) -> dict[str, Path]:
    """A lock of a target and a drafter GGUF (local folders), a policy reviewing TEMPLATE with
    ollama caps, and the template file."""
    for role, arch in (("target", "qwen3"), ("drafter", "dflash")):
        (tmp_path / role).mkdir()
        write_gguf(tmp_path / role / f"{role}.gguf", arch)
    lock = write_lock(build_lock({r: str(tmp_path / r) for r in ("target", "drafter")}).lock,
                      tmp_path / "gguf.lock")
    digest = hashlib.sha256(TEMPLATE.encode()).hexdigest()
    policy = write_policy(tmp_path / "policy", (
        "reviewed_templates: []\n",
        f"reviewed_templates:\n  - sha256: {digest}\n    note: the ollama Go template\n"),
        ("gguf_requires_comparison: true", "gguf_requires_comparison: false"))
    policy.write_text(policy.read_text() + LAUNCH + "  ollama: {num_ctx: 4096}\n")
    template = tmp_path / "template.tmpl"
    template.write_text(TEMPLATE)
    return {"lock": lock, "policy": policy, "template": template, "dir": tmp_path,
            "target": tmp_path / "target", "drafter": tmp_path / "drafter"}


def _roots(pair: dict[str, Path]) -> list[str]:
    return ["--root", f"target={pair['target']}", "--root", f"drafter={pair['drafter']}"]


def _launch(cli, pair, *more: str):
    return cli("launch", "ollama", "--lock", pair["lock"], "--policy", pair["policy"],
               *_roots(pair), "--template", pair["template"], *more)


def _check(cli, pair, modelfile: Path, *more: str):
    return cli("launch", "--check", "ollama", "--lock", pair["lock"], "--policy",
               pair["policy"], *_roots(pair), "--format", "json", *more, str(modelfile))


def _written(cli, pair) -> Path:
    out = pair["dir"] / "out" / "Modelfile"
    out.parent.mkdir(exist_ok=True)
    result = _launch(cli, pair, "--modelfile", out)
    assert result.exit_code == 0, result.stdout + result.stderr
    return out


def test_launch_writes_the_modelfile_from_the_lock(cli, pair) -> None:
    out = _written(cli, pair)
    commands = {c.name: c.args for c in parse(out.read_text())}
    assert commands == {"model": str((pair["target"] / "target.gguf").resolve()),
                        "draft": str((pair["drafter"] / "drafter.gguf").resolve()),
                        "template": TEMPLATE, "draft_num_predict": "7", "num_ctx": "4096"}
    argv = shlex.split(_launch(cli, pair, "--modelfile", out).stdout)
    assert argv[:4] == ["env", "OLLAMA_HOST=127.0.0.1:11434", "ollama", "create"]
    assert argv[4].startswith("dflash-guard-") and argv[5:] == ["-f", str(out.resolve())]


def test_the_written_modelfile_round_trips_through_the_lint(cli, pair) -> None:
    result = _check(cli, pair, _written(cli, pair))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["passed"] is True


@pytest.mark.parametrize(("edit", "where", "rule"), [
    (lambda t, p: t.replace(str((p["target"] / "target.gguf").resolve()),
                            str(p["dir"] / "other.gguf")), "FROM", "DG-LAUNCH-NOT-LOCKED"),
    (lambda t, p: t.replace(str((p["target"] / "target.gguf").resolve()), "llama3:latest"),
     "FROM", "DG-LAUNCH-NOT-LOCKED"),
    (lambda t, p: t + f"ADAPTER {p['dir'] / 'other.gguf'}\n", "ADAPTER", "DG-LAUNCH-UNLISTED"),
    (lambda t, p: t.replace("<|assistant|>", "<|assistant|> Sure!"), "TEMPLATE",
     "DG-LAUNCH-UNLISTED"),
    (lambda t, p: t + "PARAMETER temperature 0.9\n", "PARAMETER temperature",
     "DG-LAUNCH-UNLISTED"),
    (lambda t, p: t.replace("num_ctx 4096", "num_ctx 8192"), "PARAMETER num_ctx",
     "DG-LAUNCH-CAPS"),
    (lambda t, p: t.replace("draft_num_predict 7", "draft_num_predict 15"),
     "PARAMETER draft_num_predict", "DG-LAUNCH-SPECULATIVE"),
    (lambda t, p: t + "SYSTEM Always agree.\n", "SYSTEM", "DG-LAUNCH-UNLISTED"),
    (lambda t, p: t + "RENDERER qwen3-coder\n", "RENDERER", "DG-LAUNCH-UNLISTED"),
])
def test_a_hand_edited_modelfile_is_refused(cli, pair, edit, where, rule) -> None:
    out = _written(cli, pair)
    (pair["dir"] / "other.gguf").write_bytes(b"GGUF" + b"unlocked")
    out.write_text(edit(out.read_text(), pair))
    result = _check(cli, pair, out)
    assert result.exit_code == 1, result.stdout + result.stderr
    findings = json.loads(result.stdout)["findings"]
    assert [(f["rule_id"], f["file"]) for f in findings] == [(rule, where)], findings


def test_a_relative_from_is_read_from_the_modelfiles_folder(cli, pair) -> None:
    out = pair["target"].parent / "Modelfile.rel"
    text = _written(cli, pair).read_text()
    out.write_text(text.replace(str((pair["target"] / "target.gguf").resolve()),
                                "./target/target.gguf"))
    assert _check(cli, pair, out).exit_code == 0
    out.write_text(text.replace(str((pair["target"] / "target.gguf").resolve()),
                                "target/missing.gguf"))
    assert "registry" in _check(cli, pair, out).stdout


def test_a_copy_with_the_locked_bytes_elsewhere_is_refused_under_root(cli, pair) -> None:
    copy = pair["dir"] / "copy.gguf"
    copy.write_bytes((pair["target"] / "target.gguf").read_bytes())
    out = _written(cli, pair)
    out.write_text(out.read_text().replace(str((pair["target"] / "target.gguf").resolve()),
                                           str(copy)))
    result = _check(cli, pair, out)
    assert result.exit_code == 1 and "--root" in result.stdout
    # without --root the sha256 decides: the same bytes are the locked file
    plain = cli("launch", "--check", "ollama", "--lock", pair["lock"], "--policy",
                pair["policy"], "--format", "json", str(out))
    assert plain.exit_code == 0, plain.stdout


def test_a_modelfile_ollama_would_not_parse_is_an_input_error(cli, pair) -> None:
    out = pair["dir"] / "Modelfile.bad"
    out.write_text(f"FROM {pair['target'] / 'target.gguf'}\nTEMPLATE \"\"\"unclosed\n")
    result = _check(cli, pair, out)
    assert result.exit_code == 2
    assert "ollama's parser refuses it" in one_line_error(result)
    out.write_text("PARAMETER num_ctx 1\n")
    assert "no FROM line" in one_line_error(_check(cli, pair, out))


def test_launch_refuses_an_unreviewed_template_and_a_public_bind(cli, pair) -> None:
    pair["template"].write_text(TEMPLATE + " ")
    result = _launch(cli, pair, "--modelfile", pair["dir"] / "Modelfile")
    assert result.exit_code == 1 and "reviewed_templates" in result.stdout
    assert not (pair["dir"] / "Modelfile").exists()
    pair["template"].write_text(TEMPLATE)
    exposed = _launch(cli, pair, "--modelfile", pair["dir"] / "Modelfile", "--host", "0.0.0.0",
                      "--api-key-env", "HOME")
    assert exposed.exit_code == 1 and "checks no API key" in exposed.stdout


def test_launch_never_writes_over_an_input(cli, pair) -> None:
    before = pair["template"].read_bytes()
    result = _launch(cli, pair, "--modelfile", pair["template"])
    assert result.exit_code == 2 and "input" in one_line_error(result)
    assert pair["template"].read_bytes() == before
    inside = _launch(cli, pair, "--modelfile", pair["target"] / "Modelfile")
    assert inside.exit_code == 2 and not (pair["target"] / "Modelfile").exists()


def test_parameter_spellings_of_other_commands_are_read_as_those_commands(cli, pair) -> None:
    """ollama records `PARAMETER adapter X` as the command `adapter`, and its create request
    reads it as ADAPTER (`parser.go` `CreateRequest`): so does the lint."""
    out = _written(cli, pair)
    text = out.read_text()
    out.write_text(text + f"PARAMETER adapter {pair['dir'] / 'x.gguf'}\n")
    assert [f["file"] for f in json.loads(_check(cli, pair, out).stdout)["findings"]] == [
        "ADAPTER"]
    out.write_text(text + "PARAMETER model llama3\n")
    files = [f["file"] for f in json.loads(_check(cli, pair, out).stdout)["findings"]]
    assert files == ["FROM", "FROM"]  # two FROMs, one of them a registry name


def test_a_non_number_cap_is_refused(cli, pair) -> None:
    out = _written(cli, pair)
    out.write_text(out.read_text().replace("num_ctx 4096", "num_ctx nan"))
    assert "DG-LAUNCH-CAPS" in _check(cli, pair, out).stdout


def test_the_baseline_modelfile_turns_drafting_off(cli, pair) -> None:
    out = pair["dir"] / "Modelfile.baseline"
    result = _launch(cli, pair, "--baseline", "--modelfile", out)
    assert result.exit_code == 0, result.stdout + result.stderr
    commands = {c.name: c.args for c in parse(out.read_text())}
    assert "draft" not in commands and commands["draft_num_predict"] == "0"
    assert shlex.split(result.stdout)[4].endswith("-baseline")
    assert _check(cli, pair, out).exit_code == 0


def test_a_template_ollamas_quoting_cannot_carry_is_refused(cli, pair) -> None:
    """A template holding `\"\"\"` and a newline would be cut short where ollama reads it back:
    the file is parsed before it is written, and not written."""
    broken = 'line one """\nline two'
    digest = hashlib.sha256(broken.encode()).hexdigest()
    policy = pair["policy"].read_text().replace(
        "reviewed_templates:\n", f"reviewed_templates:\n  - sha256: {digest}\n    note: x\n")
    pair["policy"].write_text(policy)
    pair["template"].write_text(broken)
    out = pair["dir"] / "Modelfile.cut"
    result = _launch(cli, pair, "--modelfile", out)
    assert result.exit_code == 1 and "quoting cannot carry" in result.stdout
    assert not out.exists()


@pytest.mark.parametrize(("role", "arch", "keys", "said"), [
    ("drafter", "qwen3", {}, "MTP draft"),
    ("target", "gemma4", {}, "built-in renderer"),
    ("target", "qwen3", {"source_quantization": "hf_fp8", "source_fp8_tensors": "x"}, "Q8_0"),
])
def test_what_ollama_create_would_change_is_refused(cli, tmp_path, role, arch, keys, said
                                                    ) -> None:
    """ollama runs a non-DFlash draft GGUF as an MTP draft, renders some architectures with a
    built-in renderer instead of TEMPLATE, and quantizes a source-FP8 GGUF itself
    (server/create.go, llm/llama_server.go): launch refuses, and the lint finds it."""
    files = {"target": ("qwen3", {}), "drafter": ("dflash", {}), role: (arch, keys)}
    for name, (kind, extra) in files.items():
        (tmp_path / name).mkdir()
        write_gguf(tmp_path / name / f"{name}.gguf", kind, **extra)
    lock = write_lock(build_lock({r: str(tmp_path / r) for r in files}).lock, tmp_path / "l.lock")
    digest = hashlib.sha256(TEMPLATE.encode()).hexdigest()
    policy = write_policy(tmp_path / "policy", (
        "reviewed_templates: []\n", f"reviewed_templates:\n  - sha256: {digest}\n    note: t\n"),
        ("gguf_requires_comparison: true", "gguf_requires_comparison: false"))
    (tmp_path / "t.tmpl").write_text(TEMPLATE)
    roots = ["--root", f"target={tmp_path / 'target'}", "--root",
             f"drafter={tmp_path / 'drafter'}"]
    out = tmp_path / "Modelfile"
    result = cli("launch", "ollama", "--lock", lock, "--policy", policy, *roots, "--template",
                 tmp_path / "t.tmpl", "--modelfile", out)
    assert result.exit_code == 1 and said in result.stdout and not out.exists()
    out.write_text(f"FROM {tmp_path / 'target' / 'target.gguf'}\n"
                   f"DRAFT {tmp_path / 'drafter' / 'drafter.gguf'}\nTEMPLATE {TEMPLATE}\n")
    checked = cli("launch", "--check", "ollama", "--lock", lock, "--policy", policy, *roots,
                  "--format", "json", out)
    findings = json.loads(checked.stdout)["findings"]
    assert checked.exit_code == 1 and [said in f["message"] for f in findings] == [True]


def test_sarif_points_at_the_modelfile(cli, pair) -> None:
    out = _written(cli, pair)
    out.write_text(out.read_text() + "ADAPTER ./x.gguf\n")
    result = cli("launch", "--check", "ollama", "--lock", pair["lock"], "--policy",
                 pair["policy"], *_roots(pair), "--format", "sarif", str(out))
    assert result.exit_code == 1
    run = json.loads(result.stdout)["runs"][0]
    [location] = run["results"][0]["locations"]
    assert location["physicalLocation"]["artifactLocation"]["uri"].endswith("Modelfile")
