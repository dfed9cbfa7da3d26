"""A model's tokenizer, generation and template files held against its upstream (issue 46,
part 2): DG-UPSTREAM-DIFF against an upstream folder (the policy's, or scan's --upstream),
DG-UPSTREAM-NONE for a tokenizer file no upstream and no published file of the catalog vouches
for. The benign side is the built-in pair (its files are the catalog's) and a copy of an
upstream that only reformats it; each bad case is a planted change an engine reads."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from dflash_guard import rules
from dflash_guard.pins.loaded import DeployEngine
from dflash_guard.scan import scan_paths, upstream
from dflash_guard.scan.generation import canonical_sha256
from dflash_guard.severity import Severity

DIFF, NONE = rules.UPSTREAM_DIFF.id, rules.UPSTREAM_NONE.id
VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "tokenizer-upstream"
# the published repos whose tokenizer files are vendored byte for byte (SOURCES.md)
PUBLISHED = sorted(folder for folder in VECTORS.iterdir()
                   if folder.is_dir() and folder.name != "unverified-bytes")
LFS = json.loads((VECTORS / "lfs-pointers.json").read_text())


def _upstream_findings(report) -> list:
    return [f for f in report.findings if f.rule_id in (DIFF, NONE)]


def _edit_json(path: Path, change) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.fixture
def copy(builtin_pair, tmp_path) -> Path:
    return Path(shutil.copytree(builtin_pair.target, tmp_path / "target"))


def test_the_built_in_pair_is_in_the_catalog(builtin_pair):
    """The catalog vouches for the built-in pair's tokenizer files, so its scan is quiet."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        document = json.loads((builtin_pair.target / name).read_bytes())
        assert upstream.known_files()[canonical_sha256(document)]["file"] == name
    assert _upstream_findings(scan_paths([builtin_pair.target])) == []


def test_the_catalog_holds_every_vendored_published_file_with_its_source():
    """Each vendored tokenizer file is in the catalog under the digest of its canonical JSON,
    and each top-level file known by the Hub's LFS digest under that digest."""
    catalog = upstream.known_files()
    names = set()
    for folder in PUBLISHED:
        for path in folder.glob("*.json"):
            if path.name == "generation_config.json":  # `generation`'s own catalog
                continue
            entry = catalog[canonical_sha256(json.loads(path.read_bytes()))]
            assert entry["file"] == path.name and f"{folder.name}/{path.name}" in entry["source"]
            names.add(folder.name.replace("--", "/", 1))
            assert names & set(entry["name"].split(", "))
    for repo, files in LFS.items():
        for name, pointer in files.items():
            if "/" not in name and not name.endswith(".jinja"):
                assert repo in catalog[pointer["sha256"]]["name"].split(", ")
    assert {"Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "openai/gpt-oss-20b"} <= names


@pytest.mark.parametrize("published", PUBLISHED, ids=lambda folder: folder.name)
def test_published_tokenizer_files_are_quiet_and_one_changed_value_is_not(published, tmp_path):
    """The real files a published target ships have an upstream (the catalog); the same file
    with one special token's flag flipped has none."""
    folder = Path(shutil.copytree(published, tmp_path / "model"))
    assert _upstream_findings(scan_paths([folder])) == []

    def flip(document):
        tokens = document["added_tokens_decoder"]
        first = tokens[min(tokens, key=int)]
        first["special"] = not first["special"]

    _edit_json(folder / "tokenizer_config.json", flip)
    found = _upstream_findings(scan_paths([folder]))
    assert [(f.rule_id, f.file) for f in found] == [(NONE, "tokenizer_config.json")]
    found = _upstream_findings(scan_paths([folder], upstream_folder=published))
    assert [(f.rule_id, f.severity) for f in found] == [(DIFF, Severity.high)]
    assert ".special: " in found[0].message and "(upstream " in found[0].message


def test_a_changed_tokenizer_file_has_no_upstream_until_reviewed(copy):
    _edit_json(copy / "tokenizer_config.json",
               lambda d: d.update(clean_up_tokenization_spaces=True))
    found = _upstream_findings(scan_paths([copy]))
    assert [(f.rule_id, f.severity, f.file) for f in found] == [
        (NONE, Severity.medium, "tokenizer_config.json")]
    digest = hashlib.sha256((copy / "tokenizer_config.json").read_bytes()).hexdigest()
    assert digest in found[0].message
    assert _upstream_findings(scan_paths([copy], reviewed_files=frozenset({digest}))) == []


def test_each_difference_from_the_upstream_is_spelled_out(builtin_pair, copy):
    _edit_json(copy / "tokenizer_config.json",
               lambda d: d.update(clean_up_tokenization_spaces=True))
    _edit_json(copy / "tokenizer.json", lambda d: d["added_tokens"][0].update(special=False))
    (copy / "generation_config.json").unlink()
    found = {f.file: f for f in _upstream_findings(
        scan_paths([copy], upstream_folder=builtin_pair.target))}
    config = found["tokenizer_config.json"]
    assert (config.rule_id, config.severity) == (DIFF, Severity.high)
    assert "clean_up_tokenization_spaces: true (upstream false)" in config.message
    assert "added_tokens[0].special: false (upstream true)" in found["tokenizer.json"].message
    gone = found["generation_config.json"]  # vLLM then reads config.json's (test_upstream_attacks)
    assert (gone.rule_id, gone.severity) == (DIFF, Severity.high)
    assert ("the upstream ships generation_config.json and the engine loads none from this "
            "folder") in gone.message


def test_a_file_the_upstream_does_not_ship_is_a_difference(builtin_pair, copy):
    (copy / "special_tokens_map.json").write_text('{"eos_token": "<|eos|>"}')
    found = _upstream_findings(scan_paths([copy], upstream_folder=builtin_pair.target))
    assert [(f.rule_id, f.file) for f in found] == [(DIFF, "special_tokens_map.json")]
    assert "the upstream ships no special_tokens_map.json" in found[0].message


def test_the_same_values_in_other_bytes_are_the_upstream(builtin_pair, copy):
    """The engine reads values: a file the upstream's reformatted is not a difference."""
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        _edit_json(copy / name, lambda d: None)  # compact, not indented
        assert (copy / name).read_bytes() != (builtin_pair.target / name).read_bytes()
    assert _upstream_findings(scan_paths([copy], upstream_folder=builtin_pair.target)) == []


def test_a_vocabulary_difference_is_counted_not_dumped(builtin_pair, copy):
    def swap(document):
        vocab = document["model"]["vocab"]
        first, second = list(vocab)[10:12]
        vocab[first], vocab[second] = vocab[second], vocab[first]

    _edit_json(copy / "tokenizer.json", swap)
    [finding] = _upstream_findings(scan_paths([copy], upstream_folder=builtin_pair.target))
    assert finding.message.startswith("differs from the upstream's: 2 difference(s): model.vocab.")
    assert len(finding.message) < 700


def test_a_text_file_difference_shows_its_changed_lines(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder, line in ((ours, "{{ messages }} and more"), (theirs, "{{ messages }}")):
        folder.mkdir()
        (folder / "chat_template.jinja").write_text(f"start\n{line}\nend\n")
    found = upstream.upstream_findings(ours, "", {"chat_template.jinja"}, theirs, frozenset())
    assert [f.rule_id for f in found] == [DIFF]
    assert "-{{ messages }}; +{{ messages }} and more" in found[0].message


def test_a_file_no_engine_loads_is_not_judged(copy):
    """A llama.cpp deploy reads the GGUF, not the folder's tokenizer files."""
    _edit_json(copy / "tokenizer_config.json", lambda d: d.update(model_max_length=1))
    (copy / "model.gguf").write_bytes(b"GGUF" + bytes(20))
    llamacpp = (DeployEngine("llama.cpp", "llama.cpp"),)
    report = scan_paths([copy], engines=llamacpp)
    assert "tokenizer_config.json" in report.not_loaded
    assert [f for f in report.findings if f.rule_id in (DIFF, NONE)
            and f.severity > Severity.low] == []


def test_scan_cli_compares_with_upstream(cli, builtin_pair, copy):
    _edit_json(copy / "tokenizer.json", lambda d: d.update(normalizer={"type": "Lowercase"}))
    r = cli("scan", copy, "--upstream", builtin_pair.target, "--format", "json")
    assert r.exit_code == 1, r.stderr
    rows = [f for f in json.loads(r.stdout)["findings"] if f["rule_id"] == DIFF]
    assert 'normalizer: {"type": "Lowercase"} (upstream null)' in rows[0]["message"]
    r = cli("scan", copy, "--upstream", copy / "nothing-here")
    assert r.exit_code == 2 and "--upstream must be a model folder" in r.stderr


def test_the_tokenizer_file_transformers_selects_is_compared_too(builtin_pair, copy):
    """`fast_tokenizer_files` makes transformers load another file than tokenizer.json: it is
    held against the upstream under its own name, and an upstream's file of that name is no
    reference (only its locked files are)."""
    chosen = "tokenizer.4.0.json"
    _edit_json(copy / "tokenizer_config.json",
               lambda d: d.update(fast_tokenizer_files=[chosen]))
    shutil.copyfile(copy / "tokenizer.json", copy / chosen)
    _edit_json(copy / chosen, lambda d: d.update(normalizer={"type": "Lowercase"}))
    upstream_folder = Path(shutil.copytree(builtin_pair.target, copy.parent / "upstream"))
    shutil.copyfile(copy / chosen, upstream_folder / chosen)  # not an upstream file
    found = {f.file: f for f in _upstream_findings(
        scan_paths([copy], upstream_folder=upstream_folder))}
    assert f"the upstream ships no {chosen}" in found[chosen].message
    assert "fast_tokenizer_files: [\"tokenizer.4.0.json\"] (upstream absent)" in (
        found["tokenizer_config.json"].message)
    alone = {f.file: f.rule_id for f in _upstream_findings(scan_paths([copy]))}
    assert alone == {chosen: NONE, "tokenizer_config.json": NONE}


def _vocab_gguf(out: Path, target: Path, *, text: dict[int, str] | None = None,
                types: dict[int, int] | None = None, extra: tuple[tuple[str, int], ...] = (),
                eos: int | None = None, merges: tuple[str, ...] = (),
                split: tuple[int, int] | None = None) -> Path:
    """The built-in target's vocabulary as `convert_hf_to_gguf.py` writes it (tokens by id,
    CONTROL for its special added tokens, its eos id), with planted changes."""
    from tests.support.scan_builders import write_gguf

    tokenizer = json.loads((target / "tokenizer.json").read_text())
    by_id = {i: t for t, i in tokenizer["model"]["vocab"].items()}
    by_id.update({a["id"]: a["content"] for a in tokenizer["added_tokens"]})
    special = {a["id"] for a in tokenizer["added_tokens"] if a["special"]}
    tokens = [(text or {}).get(i, by_id[i]) for i in range(len(by_id))] + [t for t, _ in extra]
    kinds = [(types or {}).get(i, upstream.gguf_tokens.CONTROL if i in special else
                               upstream.NORMAL) for i in range(len(by_id))]
    kinds += [kind for _, kind in extra]
    config = json.loads((target / "generation_config.json").read_text())

    def vocabulary(writer) -> None:
        if split is not None:  # llama.cpp's split keys (`split.no`, `split.count`)
            writer.add_uint16("split.no", split[0])
            writer.add_uint16("split.count", split[1])
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_types(kinds)
        if merges:
            writer.add_token_merges(list(merges))
        writer.add_eos_token_id(config["eos_token_id"] if eos is None else eos)

    return write_gguf(out, vocabulary, "qwen3")


def _gguf_differences(path: Path, target: Path) -> list[str]:
    from kernels_ref.gguf_reader import read_gguf

    tokenizer = json.loads((target / "tokenizer.json").read_text())
    end = json.loads((target / "generation_config.json").read_text())["eos_token_id"]
    with path.open("rb") as handle, read_gguf(handle) as gguf:
        return upstream.gguf_differences(gguf, tokenizer, {end})


def test_a_gguf_vocabulary_as_the_converter_writes_it_is_the_upstream(builtin_pair, tmp_path):
    same = _vocab_gguf(tmp_path / "same.gguf", builtin_pair.target,
                       extra=(("[PAD260]", upstream.UNUSED),),  # the converter's padding
                       merges=("<|bos|> <|pad|>",))  # two special tokens: it never applies
    assert _gguf_differences(same, builtin_pair.target) == []


@pytest.mark.parametrize(("change", "words"), [
    ({"text": {65: "B"}}, "token 65 'B' (upstream 'A')"),
    ({"types": {65: 3}}, "token 65 'A' is CONTROL"),
    ({"types": {257: 1}}, "token 257 '<|endoftext|>' is NORMAL (upstream special)"),
    ({"eos": 65}, "tokenizer.ggml.eos_token_id 65 (upstream [257])"),
    ({"extra": (("[PAD260]", 1),)}, "token 260 '[PAD260]' (upstream none)"),
    ({"merges": ("A B",)}, "merges: 1 (upstream 0), first different at 0"),
], ids=["text", "control", "normal-special", "eos", "padding-not-unused", "merge"])
def test_each_gguf_vocabulary_change_is_a_difference(builtin_pair, tmp_path, change, words):
    changed = _vocab_gguf(tmp_path / "changed.gguf", builtin_pair.target, **change)
    assert [line for line in _gguf_differences(changed, builtin_pair.target)
            if words in line], _gguf_differences(changed, builtin_pair.target)


def test_scan_holds_the_gguf_llamacpp_loads_against_the_upstream(builtin_pair, tmp_path):
    folder = tmp_path / "gguf-target"
    folder.mkdir()
    changed = _vocab_gguf(folder / "target.gguf", builtin_pair.target, types={65: 3})
    llamacpp = (DeployEngine("llama.cpp", "llama.cpp"),)
    [finding] = _upstream_findings(scan_paths([folder], engines=llamacpp,
                                              upstream_folder=builtin_pair.target))
    assert (finding.rule_id, finding.severity, finding.file) == (DIFF, Severity.high,
                                                                "target.gguf")
    assert "its vocabulary differs from the upstream's tokenizer.json" in finding.message
    digest = hashlib.sha256(changed.read_bytes()).hexdigest()
    assert _upstream_findings(scan_paths([folder], engines=llamacpp,
                                         upstream_folder=builtin_pair.target,
                                         reviewed_files=frozenset({digest}))) == []


def test_a_gguf_with_no_upstream_vocabulary_to_hold_it_against_is_not_quiet(builtin_pair,
                                                                          tmp_path):
    folder, bare = tmp_path / "gguf-target", tmp_path / "upstream"
    folder.mkdir()
    bare.mkdir()
    _vocab_gguf(folder / "target.gguf", builtin_pair.target)
    shutil.copyfile(builtin_pair.target / "tokenizer_config.json", bare / "tokenizer_config.json")
    llamacpp = (DeployEngine("llama.cpp", "llama.cpp"),)
    for upstream_tokenizer in (None, "{not json"):
        if upstream_tokenizer is not None:
            (bare / "tokenizer.json").write_text(upstream_tokenizer)
        [finding] = _upstream_findings(scan_paths([folder], engines=llamacpp,
                                                  upstream_folder=bare))
        assert (finding.rule_id, finding.severity) == (DIFF, Severity.medium)
        assert "cannot be held against the upstream's tokenizer.json" in finding.message


def test_a_split_ggufs_later_parts_are_not_held_against_the_vocabulary(builtin_pair, tmp_path):
    """llama.cpp reads the vocabulary from a split model's first part only; the later parts
    carry none (their tensors load through the first)."""
    from tests.support.scan_builders import write_gguf

    folder = tmp_path / "split-target"
    folder.mkdir()
    _vocab_gguf(folder / "target-00001-of-00002.gguf", builtin_pair.target, split=(0, 2))

    def later_part(writer) -> None:
        writer.add_uint16("split.no", 1)
        writer.add_uint16("split.count", 2)

    write_gguf(folder / "target-00002-of-00002.gguf", later_part, "qwen3")
    llamacpp = (DeployEngine("llama.cpp", "llama.cpp"),)
    report = scan_paths([folder], engines=llamacpp, upstream_folder=builtin_pair.target)
    assert "target-00002-of-00002.gguf" in report.loaded_files
    assert _upstream_findings(report) == []
