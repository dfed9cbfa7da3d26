"""Every command block of README.md and docs/ either runs in a test as written or is listed
here with the reason it cannot (issue 36, item 9 and "done when"): a block is run when a
`<!-- doc-test: NAME -->` line stands right above it (`test_block_NAME` below runs it, or
the module RUN_ELSEWHERE names) or it lies between
`<!-- NAME:start -->` and `<!-- NAME:end -->` (tests/test_docs.py runs those). A block that is
neither, and is not in NOT_RUN, fails the inventory; so does a NOT_RUN entry no block matches.

Blocks that start servers with `&` run under `bash` in their own process group on free ports
(the page's ports replaced), and the group is killed when the block ends, whatever it did."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.doc_blocks import ALL, RUN, Block, blocks, clone_root, run_block
from tests.support.installed import dflash_wheel_at_hand
from tests.support.trust import REPO

# blocks other modules run: each names its block there
RUN_ELSEWHERE = {"walk": "tests/test_docs.py", "reference-servers": "tests/test_docs.py",
                 "vllm-launch": "tests/engine/test_vllm.py",
                 "vllm-check": "tests/engine/test_vllm.py",
                 "vllm-diff": "tests/engine/test_vllm.py",
                 "sglang-check": "tests/launch/test_launch_check_sglang.py"}

# (page, the start of the block's first line) -> why no test runs it as written.
NOT_RUN = {
    ("README.md", "make demo    # creates .venv, installs, runs the whole gate on the built-in"):
        "creates a venv and installs from an index (the suite never runs make)",
    ("README.md", "python3.11 -m venv ~/.dflash-guard"):
        "installs the hashed release from PyPI (tests/release installs the same wheels offline)",
    ("README.md", "dflash-guard lock --target Qwen/Qwen3-8B@<40-hex commit> \\"):
        "needs the Hub and a commit the reader looks up",
    ("advisories.md", "dflash-guard audit --lock dflash.lock --advisories FEED [--advisories"):
        "a synopsis (placeholders)",
    ("ci.md", "python -m build                    # sdist + wheel (policies and the built-in"):
        "builds from an index (tests/release builds the wheel offline)",
    ("diff-testing.md", "dflash-guard fixtures make pair/ [--force]             # the built-in"):
        "a synopsis (placeholders)",
    ("diff-testing.md", "# vLLM: baseline, and candidate with the DFlash drafter (15 draft toke"):
        "needs a GPU: vLLM's CUDA build and SGLang on Qwen3-8B",
    ("diff-testing.md", "$ dflash-guard difftest endpoint --baseline http://127.0.0.1:36087 --c"):
        "a transcript (the command and what it printed)",
    ("diff-testing.md", "$ dflash-guard difftest isolation --candidate http://127.0.0.1:60185 -"):
        "a transcript (the command and what it printed)",
    ("engines.md", "gguf_comparisons:"): "a policy excerpt (YAML), not a command",
    ("kernels-ref.md", "PYTHON=python3 scripts/gpu-check.sh [bench_cuda.py options, e.g. --sha"):
        "needs a GPU (CUDA)",
    ("lock-and-verify.md", "dflash-guard lock --target Qwen/Qwen3-8B@<40-hex commit> \\"):
        "a synopsis (placeholders; needs the Hub)",
    ("policies.md", "dflash-guard policy check my-policy.yaml   # 0 valid, 1 valid but the g"):
        "a synopsis ([FILE|NAME])",
    ("policies.md", "dflash-guard gate [--lock dflash.lock] [--policy strict] [--root ROLE="):
        "a synopsis (placeholders)",
    ("policies.md", "│ lockfile           │ pass    │ 2 artifacts and 1 engine(s) pinned, ..."):
        "output, not a command",
    ("real-vocab.md", "prompt mismatch before any decoding: prompt 'date' differs at token 19"):
        "output, not a command",
    ("rollout.md", "$ dflash-guard bench --baseline http://127.0.0.1:40131 --candidate htt"):
        "a transcript (the command and what it printed)",
    ("rollout.md", "$ dflash-guard bench --baseline http://127.0.0.1:41007 --candidate htt"):
        "a transcript (the command and what it printed)",
    ("rollout.md", "rollout: speedup 1.29x at concurrency 2 (baseline 167.5 tok/s, candida"):
        "output, not a command",
    ("rollout.md", "$ dflash-guard monitor --metrics http://127.0.0.1:33175/metrics --inte"):
        "a transcript (the command and what it printed)",
    ("rollout.md", "$ dflash-guard monitor --metrics http://127.0.0.1:41377/metrics --inte"):
        "a transcript (the command and what it printed)",
    ("scanning.md", "dflash-guard scan PATH... [--target DIR] [--format text|json|sarif] [-"):
        "a synopsis (placeholders)",
    ("scanning.md", '{"tool": "dflash-guard", "version": "0.1.0", "fail_on": "medium", "pas'):
        "output, not a command",
    ("signing.md", "dflash-guard sign dflash.lock               # Sigstore, keyless: writes"):
        "keyless signing needs a CI identity and Sigstore's servers",
    ("signing.md", "$ dflash-guard gate --lock dflash.lock --policy ./mine.yaml \\"):
        "a transcript (the command and what it printed)",
    ("signing.md", "cosign verify-blob-attestation --key key.pub --insecure-ignore-tlog --"):
        "cosign cannot be installed here; tests/interop runs sigstore-js on the same bundles",
    ("vllm.md", "make engine          # llama.cpp's llama-server, then vLLM"):
        "builds both engines from an index (the suite never runs make)",
    ("vllm.md", "dflash-guard launch vllm --approval approval.json --lock dflash.lock --p"):
        "needs a signed approval of a production lock pinning the vLLM wheel "
        "(tests/launch/test_launch_approval.py runs the same flow on the fixture pair)",
    ("vllm.md", ".../venv/bin/python -m vllm.entrypoints.openai.api_server --model /abs"):
        "output, not a command",
    ("vllm.md", "dflash-guard launch vllm --lock pair64.lock --policy policy.yaml --program"):
        "runs vLLM in the foreground (tests/engine/test_vllm_confined.py runs this launch)",
    ("vllm.md", "dflash-guard gate --lock pair64.lock --policy policy.yaml --root target"):
        "serves vLLM in the foreground, supervised (tests/engine/test_vllm_confined.py runs "
        "this chain: gate, launch --approval --exec --verify-served, the record monitor takes)",
}


def listed(block: Block) -> tuple[str, str] | None:
    """The block's NOT_RUN entry, if any."""
    first = block.text.splitlines()[0] if block.text.strip() else ""
    return next((key for key in NOT_RUN if key[0] == block.page and first.startswith(key[1])),
                None)


def test_every_command_block_runs_or_says_why():
    runners = {name.removeprefix("test_block_").replace("_", "-")
               for name in globals() if name.startswith("test_block_")}
    unlisted = [f"{b.page}:{b.line}" for b in ALL if b.marker is None and listed(b) is None]
    assert unlisted == [], f"command blocks no test runs and NOT_RUN does not list: {unlisted}"
    stale = sorted(set(NOT_RUN) - {listed(b) for b in ALL if b.marker is None})
    assert stale == [], f"NOT_RUN entries no block matches any more: {stale}"
    unknown = sorted({b.marker for b in ALL if b.marker} - runners - set(RUN_ELSEWHERE))
    assert unknown == [], f"doc-test markers without a test: {unknown}"
    assert sorted(runners - set(RUN)) == []  # each runner finds its block
    assert all(reason for reason in NOT_RUN.values())
    for name, module in RUN_ELSEWHERE.items():
        assert name in RUN and f'"{name}"' in (REPO / module).read_text(), (name, module)


def test_the_inventory_sees_an_unmarked_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("x\n\n<!-- doc-test: one -->\n```sh\ndflash-guard -h\n```\n\n```\nls\n```\n")
    first, second = blocks(page)
    assert first.marker == "one" and second.marker is None and listed(second) is None


def test_block_verify_installed(tmp_path):
    """OK with the locked wheel at hand (`make` keeps it in .wheelhouse/), else CANNOT TELL and
    exit 1, as the page says."""
    root = clone_root(tmp_path)
    if (REPO / ".wheelhouse").is_dir():
        (root / ".wheelhouse").symlink_to(REPO / ".wheelhouse")
    proven = dflash_wheel_at_hand(root)
    output = run_block("verify-installed", root, exit_code=0 if proven else 1)
    assert ("OK: " if proven else "CANNOT TELL: ") in output
    assert "dflash/benchmark.py:154" in output


def test_block_policy_copy(tmp_path):
    run_block("policy-copy", tmp_path, exit_code=1)  # strict names no signer: check says so
    assert "name: strict-copy" in (tmp_path / "my-strict.yaml").read_text()


def test_block_review(cli, builtin_pair, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(builtin_pair.target, tmp_path / "pair" / "target")
    shutil.copytree(builtin_pair.drafter, tmp_path / "pair" / "drafter")
    assert cli("lock", "--target", "pair/target", "--drafter", "pair/drafter", "-q").exit_code == 0
    output = run_block("review", tmp_path, strict=False)  # the first review exits 1, as it says
    assert "UNREVIEWED" in output and "WRITTEN" in output and "APPROVED" in output
    assert (tmp_path / "reviewed.yaml").is_file() and (tmp_path / "approval.json").is_file()


def test_block_advisory_new(tmp_path):
    run_block("advisory-new", tmp_path)
    for name in ("a.json", "b.json", "c.json", "a.json.sig"):
        assert (tmp_path / name).is_file(), name


def test_block_model_signing(builtin_pair, tmp_path):
    """With the pair and the key pair signing.md's "Signing a lockfile" makes."""
    shutil.copytree(builtin_pair.drafter, tmp_path / "pair" / "drafter")
    subprocess.run("openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 "
                   "-nocrypt -out key.pem", shell=True, cwd=tmp_path, check=True, timeout=60)
    run_block("model-signing", tmp_path)
    assert (tmp_path / "pair" / "drafter" / "model.sig").is_file()


def test_block_pair64(tmp_path):
    run_block("pair64", tmp_path)
    assert (tmp_path / "pair64" / "target" / "model.safetensors").is_file()


@pytest.mark.slow
def test_block_real_vocab(tmp_path):
    """Offline: the session's cache holds the pinned tree build-llamacpp.sh extracted, which
    `fixtures vocab fetch` reuses."""
    from tests.support.llamacpp import source_tree

    source_tree()
    output = run_block("real-vocab", tmp_path)
    assert "already in the cache" in output
    for pair in ("pair-qwen3", "pair-llama3"):
        assert (tmp_path / pair / "target" / "chat_template.jinja").is_file()


@pytest.mark.slow
def test_block_engines_llamacpp(tmp_path):
    """docs/engines.md: build (cached), convert, two llama-servers started with `&`, both diffs,
    the servers stopped by the block's own `kill`."""
    output = run_block("engines-llamacpp", clone_root(tmp_path), ports=("8080", "8081"),
                       timeout=1800)
    assert output.count("verdict: identical") >= 2, output
    assert (tmp_path / "gguf" / "comparison.json").is_file()


def _key_pair(folder: Path) -> None:
    """key.pem and key.pub, made with the `openssl` commands signing.md gives."""
    subprocess.run("openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 "
                   "-nocrypt -out key.pem && openssl ec -in key.pem -pubout -out key.pub",
                   shell=True, cwd=folder, check=True, timeout=60, capture_output=True)


def test_block_strict_signed(builtin_pair, tmp_path):
    """policies.md's walk to strict: my-strict.yaml from the policy-copy block with steps 1-3
    applied (signers, local tier, the drafter's reviewed code), then the signing loop as written.
    Offline, with no vLLM clone, it refuses at the policy check as the page says (exit 1)."""
    shutil.copytree(builtin_pair.target, tmp_path / "pair" / "target")
    shutil.copytree(builtin_pair.drafter, tmp_path / "pair" / "drafter")
    _key_pair(tmp_path)
    run_block("policy-copy", tmp_path, exit_code=1)
    policy = tmp_path / "my-strict.yaml"
    text = policy.read_text()
    for old, new in (("public_keys: []", "public_keys: [key.pub]"),  # 1. signers
                     ("local_tier: unknown", "local_tier: official"),  # 2. the local tier
                     ("reviewed_code: []", "reviewed_code:\n  - {sha256: 7a86a0914ce48fa0762127fe5"
                      "2f97c476dd3628e7c4ebb697cc8c011e881ff4e, path: dflash.py, reviewer: "
                      "you@example.com, date: 2026-12-01}")):  # 3. reviewed code
        assert old in text, old
        text = text.replace(old, new)
    policy.write_text(text)
    output = run_block("strict-signed", tmp_path, exit_code=1)
    assert "signed by key key.pub" in output and "match byte for byte" in output, output
    assert ("REFUSED: policy: engine vllm is not a proven release build (label 'v0.28.0' "
            "proves nothing;") in " ".join(output.split()), output
    assert (tmp_path / "dflash.lock.sig").is_file() and not (tmp_path / "approval.json").exists()


@pytest.fixture(scope="module")
def trust_approval(tmp_path_factory) -> Path:
    """The folder trust.md's approval block ran in (once for both of its tests)."""
    folder = tmp_path_factory.mktemp("trust")
    output = run_block("trust-approval", folder)
    assert "APPROVED: record approval.json, signed approval.json.sig" in output, output
    return folder


def test_block_trust_approval(trust_approval):
    assert (trust_approval / "approval.json.sig").is_file()
    assert "prod.yaml" in (trust_approval / "approval.json").read_text()


def test_block_verify_approval(trust_approval, tmp_path):
    shutil.copytree(trust_approval, tmp_path, dirs_exist_ok=True)
    output = run_block("verify-approval", tmp_path)
    assert "VERIFIED" in output and "the record is about prod" in output, output
