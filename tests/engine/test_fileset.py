"""The engines' file sets, differentially (issue 44, item 2): the mirror in `pins.fileset`
against the pinned vLLM's own functions on every layout the unit tests use, and each real
engine started under `strace --seccomp-bpf -f -e trace=openat,open` on fixture layouts: the
files it opens inside the model folders are a subset of the approved (locked) set and equal to
the resolver's prediction. A traced vLLM start costs a minute or more, so it runs one layout
(a target whose `fast_tokenizer_files` picks another tokenizer file, and its drafter);
llama-server runs a DFlash pair and a split target.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from dflash_guard.pins.fileset import (
    FileSetError,
    ask_vllm,
    fast_tokenizer_file,
    llamacpp_files,
    vllm_files,
    vllm_weights_mirror,
)
from tests.support.layouts import locked, override, shard
from tests.support.llamacpp import build_server, convert, free_port
from tests.support.vllm import SERVE_ENV, install

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(3600)]
STRACE = "/usr/bin/strace"
OPEN_RE = re.compile(r'\bopen(?:at)?\((?:[^,"]*, )?"((?:[^"\\]|\\.)*)"')
READY_TIMEOUT_S = 1200.0


def opened_inside(log: Path, folders: list[Path]) -> dict[Path, set[str]]:
    """The regular files under each folder that the trace shows an open of (relative names)."""
    found: dict[Path, set[str]] = {f: set() for f in folders}
    roots = {f: os.path.realpath(f) + os.sep for f in folders}
    for line in log.read_text(errors="replace").splitlines():
        match = OPEN_RE.search(line)
        if match is None:
            continue
        path = os.path.realpath(match.group(1))
        for folder, root in roots.items():
            if path.startswith(root) and os.path.isfile(path):
                found[folder].add(os.path.relpath(path, root.rstrip(os.sep)))
    return found


@contextlib.contextmanager
def traced(argv: list[str], ready: str, log: Path, env: dict[str, str] | None = None
           ) -> Iterator[None]:
    """`argv` under strace (its trace in `log`), until `ready` answers 200; then stopped with
    its whole process group."""
    output = log.with_suffix(".out")
    with output.open("w") as out:
        # --seccomp-bpf: the traced processes stop only at the two calls traced, not at every
        # system call (the same lines in the log; vLLM's traced start took 82 s instead of
        # 259 s on a loaded 2-core machine, 2026-12-06)
        process = subprocess.Popen([STRACE, "--seccomp-bpf", "-f", "-s", "4096", "-e",
                                    "trace=openat,open", "-o", str(log), *argv], stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"{argv[0]} exited {process.returncode}:\n"
                                     f"{output.read_text()[-3000:]}")
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(ready, timeout=2.0).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"{argv[0]} not ready in {READY_TIMEOUT_S} s"
            time.sleep(0.5)
        yield
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


# --- the mirror against the pinned vLLM's own functions ------------------------------------


def _layouts(builtin_pair, root: Path) -> dict[str, Path]:
    """Every weight layout the unit tests judge, one folder each."""
    def copy(name: str) -> Path:
        return Path(shutil.copytree(builtin_pair.target, root / name))

    layouts = {"target": builtin_pair.target, "drafter": builtin_pair.drafter}
    override(layouts.setdefault("q2", copy("q2")))
    shard(layouts.setdefault("shards", copy("shards")))
    extra = layouts.setdefault("unindexed", copy("unindexed"))
    override(extra, "model-00003-of-00002.safetensors")
    shard(extra)
    override(layouts.setdefault("consolidated", copy("consolidated")), "consolidated.safetensors")
    missing = layouts.setdefault("missing", copy("missing"))
    shard(missing)
    (missing / "model-00002-of-00002.safetensors").unlink()
    bins = layouts.setdefault("bin", root / "bin")
    bins.mkdir()
    for name in ("pytorch_model-00002.bin", "pytorch_model-00010.bin", "optimizer.pt"):
        (bins / name).write_bytes(b"x")
    (root / "empty").mkdir()
    layouts["empty"] = root / "empty"
    tokenizers = layouts.setdefault("tokenizers", copy("tokenizers"))
    config = json.loads((tokenizers / "tokenizer_config.json").read_text())
    config["fast_tokenizer_files"] = ["tokenizer.3.0.json", ".cache/tokenizer.4.0.0.json",
                                      "tokenizer.99.json"]
    (tokenizers / "tokenizer_config.json").write_text(json.dumps(config))
    return layouts


def test_the_mirror_answers_as_the_pinned_vllm_does(builtin_pair, tmp_path):
    layouts = _layouts(builtin_pair, tmp_path)
    answers = ask_vllm(str(install()), layouts.values())
    for name, folder in layouts.items():
        weights, tokenizer = answers[folder]
        try:
            mirror: object = list(vllm_weights_mirror(folder))
        except FileSetError:
            mirror = "refused"
        engine = "refused" if isinstance(weights, dict) else weights
        assert mirror == engine, (name, weights)
        config = json.loads((folder / "tokenizer_config.json").read_text()) \
            if (folder / "tokenizer_config.json").is_file() else {}
        expected = fast_tokenizer_file(config["fast_tokenizer_files"]) \
            if "fast_tokenizer_files" in config else "tokenizer.json"
        assert tokenizer == expected, name
        if not isinstance(weights, dict) and name != "bin":
            assert vllm_files(folder, tokenizer=name != "drafter",
                              engine=answers[folder]).loaded == \
                vllm_files(folder, tokenizer=name != "drafter").loaded


# --- what the real engines open ----------------------------------------------------------------


def test_vllm_opens_exactly_the_predicted_approved_files(padded_pair, tmp_path):
    python = install()
    target = Path(shutil.copytree(padded_pair.target, tmp_path / "target"))
    drafter = Path(shutil.copytree(padded_pair.drafter, tmp_path / "drafter"))
    # transformers takes the tokenizer file fast_tokenizer_files names for its version
    config = json.loads((target / "tokenizer_config.json").read_text())
    config["fast_tokenizer_files"] = ["tokenizer.4.0.0.json"]
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    shutil.copy(target / "tokenizer.json", target / "tokenizer.4.0.0.json")
    predicted = {target: set(vllm_files(target).loaded),
                 drafter: set(vllm_files(drafter, tokenizer=False).loaded)}
    assert "tokenizer.4.0.0.json" in predicted[target]
    assert "tokenizer.json" not in predicted[target]
    port = free_port()
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
            "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "m",
            "--max-model-len", "256", "--enforce-eager", "--dtype", "float32",
            "--speculative-config", json.dumps({"method": "dflash", "model": str(drafter),
                                                "num_speculative_tokens": 7})]
    log = tmp_path / "vllm.trace"
    with traced(argv, f"http://127.0.0.1:{port}/v1/models", log, SERVE_ENV):
        pass
    opened = opened_inside(log, [target, drafter])
    for folder in (target, drafter):
        assert opened[folder] <= locked(folder), folder.name
        assert opened[folder] == predicted[folder], folder.name


def _resplit(source: Path, out: Path, max_tensors: int) -> list[Path]:
    """`source` rewritten as a split GGUF (`out`-0000I-of-0000N.gguf), as gguf-split does."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    reader = GGUFReader(source)
    arch = reader.get_field("general.architecture")
    assert arch is not None
    writer = GGUFWriter(str(out), str(arch.contents()), split_max_tensors=max_tensors)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(out.parent.glob(f"{out.stem}-*-of-*.gguf"))


@pytest.fixture(scope="module")
def ggufs(builtin_pair, tmp_path_factory) -> tuple[Path, Path, list[Path]]:
    """The built-in pair converted by the pinned converter (target, drafter in `gguf/`), and
    the target re-split into parts (in `split/`)."""
    folder = tmp_path_factory.mktemp("ggufs")
    target = convert(builtin_pair.target, folder / "gguf" / "target.gguf")
    drafter = convert(builtin_pair.drafter, folder / "gguf" / "drafter.gguf",
                      target_dir=builtin_pair.target)
    for path in (target, drafter):
        path.with_name(path.name + ".conversion.json").unlink(missing_ok=True)
    (folder / "split").mkdir()
    parts = _resplit(target, folder / "split" / "target.gguf", 8)
    return target, drafter, parts


def _llama(binary: Path, model: Path, draft: Path | None, log: Path) -> None:
    port = free_port()
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", "256", "-np", "1", "-t", "1", "--no-webui"]
    if draft is not None:
        argv += ["-md", str(draft), "--spec-type", "draft-dflash", "--spec-draft-n-max", "3"]
    with traced(argv, f"http://127.0.0.1:{port}/health", log):
        pass


def test_llama_server_opens_exactly_the_predicted_ggufs(ggufs, tmp_path):
    target, drafter, _ = ggufs
    _llama(build_server(), target, drafter, tmp_path / "pair.trace")
    opened = opened_inside(tmp_path / "pair.trace", [target.parent])[target.parent]
    predicted = {*llamacpp_files(target).loaded, *llamacpp_files(drafter).loaded}
    assert opened <= locked(target.parent)
    assert opened == predicted == {"target.gguf", "drafter.gguf"}


def test_llama_server_opens_every_part_of_a_split_target(ggufs, tmp_path):
    _, _, parts = ggufs
    assert len(parts) > 1
    first = parts[0]
    _llama(build_server(), first, None, tmp_path / "split.trace")
    opened = opened_inside(tmp_path / "split.trace", [first.parent])[first.parent]
    assert opened <= locked(first.parent)
    assert opened == set(llamacpp_files(first).loaded) == {p.name for p in parts}
