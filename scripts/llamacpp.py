#!/usr/bin/env python3
"""Convert a Hugging Face folder to GGUF with llama.cpp's own converter; record what converted what.

`python scripts/llamacpp.py convert --tree SRC/llama.cpp HF_DIR --outfile OUT.gguf
[--target-model-dir TARGET_DIR] [--outtype f32] [--sdist-sha256 HEX]` runs the tree's
`convert_hf_to_gguf.py` (with the tree's own `gguf-py` first on the path, so the project's `gguf`
is never replaced) in a child process, then writes `OUT.gguf.conversion.json`: the converter
source sha256 (the script, and the `conversion/` and `gguf-py/gguf/` trees it imports), the
outtype, every input file's sha256, the output's sha256, and the workarounds it applied.

The converter is not edited in place. Three obstacles of a tiny byte-level BPE tokenizer (256 byte
tokens, no merges; see docs/engine-llamacpp.md) are handled in the child, before `main()` runs:
1. `TextModel.get_vocab_base_pre` refuses a vocabulary whose pre-tokenizer hash it does not know.
   For a vocabulary *without merges* every byte is a token whatever the split, so `default` is
   correct; the wrapper answers `default` in that case only and re-raises otherwise.
2. llama.cpp refuses a BPE vocabulary without a `tokenizer.ggml.merges` key, and gguf-py writes no
   empty array. The wrapper adds one merge that can never apply: two special tokens (which are
   split out before BPE and never become symbols). Only when the tokenizer has no merges at all.
3. Qwen models try the sentencepiece vocabulary first and fall back to BPE on `FileNotFoundError`,
   but import `sentencepiece` before looking for `tokenizer.model`. Without that file the wrapper
   raises the `FileNotFoundError` itself, so `sentencepiece` need not be installed.

Standard library only: it runs under the project's Python and under the converter's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

RECORD_SUFFIX = ".conversion.json"
RECORD_TYPE = "https://github.com/dflash-guard/dflash-guard/gguf-conversion/v1"
CONVERTER_SOURCES = ("convert_hf_to_gguf.py", "conversion", "gguf-py/gguf")
WORKAROUNDS = {
    "pre-tokenizer": "get_vocab_base_pre answers 'default' for a BPE vocabulary without merges",
    "merges": "one never-applicable merge between two special tokens when the vocabulary has none",
}
NO_SENTENCEPIECE = "no tokenizer.model: the sentencepiece attempt fails as not found, not on import"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digest(root: Path, names: tuple[str, ...]) -> str:
    """sha256 over `PATH\\0SHA256\\n` of every `.py` file under `names` (sorted, relative paths)."""
    lines = []
    for name in names:
        base = root / name
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for path in files:
            lines.append(f"{path.relative_to(root).as_posix()}\0{sha256_file(path)}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _tokenizer_file(model_dir: Path, target_dir: Path | None) -> Path | None:
    for folder in (model_dir, target_dir):
        if folder is not None and (folder / "tokenizer.json").is_file():
            return folder / "tokenizer.json"
    return None


def _has_no_merges(tokenizer_json: Path | None) -> bool:
    if tokenizer_json is None:
        return False
    model = json.loads(tokenizer_json.read_text(encoding="utf-8")).get("model", {})
    return model.get("type") == "BPE" and not model.get("merges")


def _special_tokens(tokenizer_json: Path) -> list[str]:
    added = json.loads(tokenizer_json.read_text(encoding="utf-8")).get("added_tokens", [])
    return [t["content"] for t in added if t.get("special")]


# --------------------------------------------------------------------------- child process


def run_converter(tree: Path, argv: list[str], tokenizer_json: Path | None) -> None:
    """Run the tree's converter in this process with the two workarounds registered."""
    sys.path[:0] = [str(tree / "gguf-py"), str(tree)]
    import gguf  # the tree's gguf-py (first on the path)
    from conversion.base import TextModel

    no_merges = _has_no_merges(tokenizer_json)
    original_pre = TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self: Any, tokenizer: Any) -> str:
        try:
            return original_pre(self, tokenizer)
        except NotImplementedError:
            if not no_merges:
                raise
            return "default"  # no merges: every byte is a token whatever the split

    original_add = gguf.SpecialVocab.add_to_gguf

    def add_to_gguf(self: Any, gw: Any, quiet: bool = False) -> None:
        if self.load_merges and not self.merges and no_merges:
            assert tokenizer_json is not None
            specials = _special_tokens(tokenizer_json)
            if len(specials) < 2:
                raise SystemExit("a merge-less vocabulary needs two special tokens for the "
                                 "never-applicable merge")
            self.merges = [f"{specials[0]} {specials[1]}"]
        original_add(self, gw, quiet)

    original_sentencepiece = TextModel._create_vocab_sentencepiece

    def create_vocab_sentencepiece(self: Any) -> Any:
        if not (Path(self.dir_model) / "tokenizer.model").is_file():
            raise FileNotFoundError(f"File not found: {Path(self.dir_model) / 'tokenizer.model'}")
        return original_sentencepiece(self)

    TextModel._create_vocab_sentencepiece = create_vocab_sentencepiece  # type: ignore[method-assign]
    TextModel.get_vocab_base_pre = get_vocab_base_pre  # type: ignore[method-assign]
    gguf.SpecialVocab.add_to_gguf = add_to_gguf  # type: ignore[method-assign]
    sys.argv = [str(tree / "convert_hf_to_gguf.py"), *argv]
    runpy.run_path(str(tree / "convert_hf_to_gguf.py"), run_name="__main__")


# --------------------------------------------------------------------------- parent process


def _input_files(folder: Path, role: str) -> list[dict[str, str]]:
    return [
        {"name": f"{role}/{p.relative_to(folder).as_posix()}", "sha256": sha256_file(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    ]


def convert(args: argparse.Namespace) -> int:
    """Convert in a child process, then write the conversion record next to the output."""
    tree, model_dir, out = args.tree.resolve(), args.model_dir.resolve(), args.outfile.resolve()
    target_dir = args.target_model_dir.resolve() if args.target_model_dir else None
    if not (tree / "convert_hf_to_gguf.py").is_file():
        print(f"{tree}: no convert_hf_to_gguf.py (not a llama.cpp tree)", file=sys.stderr)
        return 2
    tokenizer_json = _tokenizer_file(model_dir, target_dir)
    argv = [str(model_dir), "--outtype", args.outtype]
    if target_dir is not None:
        argv += ["--target-model-dir", str(target_dir)]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".convert-") as staging:
        staged = Path(staging) / out.name
        child = [sys.executable, str(Path(__file__).resolve()), "_run", "--tree", str(tree),
                 "--tokenizer-json", str(tokenizer_json or ""), "--",
                 *argv, "--outfile", str(staged)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "gguf-py"), str(tree)])}
        done = subprocess.run(child, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not staged.is_file():
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            print(f"conversion of {model_dir} failed (exit {done.returncode})", file=sys.stderr)
            return 1
        os.replace(staged, out)
    inputs = _input_files(model_dir, "model")
    if target_dir is not None:
        inputs += _input_files(target_dir, "target")
    workarounds = dict(WORKAROUNDS) if _has_no_merges(tokenizer_json) else {}
    workarounds["sentencepiece"] = NO_SENTENCEPIECE
    record = {
        "_type": RECORD_TYPE,
        "converter": {
            "name": "llama.cpp convert_hf_to_gguf.py",
            "sdist_sha256": args.sdist_sha256,
            "source_sha256": sha256_file(tree / "convert_hf_to_gguf.py"),
            "tree_sha256": tree_digest(tree, CONVERTER_SOURCES),
            "workarounds": workarounds,
        },
        "outtype": args.outtype,
        "inputs": inputs,
        "output": {"name": out.name, "sha256": sha256_file(out)},
    }
    record_path = out.with_name(out.name + RECORD_SUFFIX)
    # A private temporary name (never a fixed `.tmp` a planted link could redirect), then rename.
    fd, staged = tempfile.mkstemp(prefix=f".{record_path.name}.", dir=record_path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(staged, record_path)
    print(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    conv = commands.add_parser("convert", help="convert a HF folder and record the conversion")
    conv.add_argument("--tree", type=Path, required=True, help="the llama.cpp source tree")
    conv.add_argument("model_dir", type=Path)
    conv.add_argument("--outfile", type=Path, required=True)
    conv.add_argument("--target-model-dir", type=Path, default=None)
    conv.add_argument("--outtype", default="f32", choices=("f32", "f16", "bf16", "q8_0"))
    conv.add_argument("--sdist-sha256", default=None, help="the engine sdist the tree came from")
    child = commands.add_parser("_run", help=argparse.SUPPRESS)
    child.add_argument("--tree", type=Path, required=True)
    child.add_argument("--tokenizer-json", default="")
    child.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "_run":
        rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
        run_converter(args.tree, rest, Path(args.tokenizer_json) if args.tokenizer_json else None)
        return 0
    return convert(args)


if __name__ == "__main__":
    sys.exit(main())
