"""`scan_paths`: walk folders and files, hand each file to its detector, collect a report.

The walk is the lock's (`pins.folder.list_folder`). Each file must be positively identified as
a format no loader unpickles (`allowlist`); everything else, and every file a weight index makes
`torch.load` read whatever its name, is a possible pickle: scanned by the pickle detector,
counted in `pickle_files` and reported high unless it is a pickle read to its end. Nothing is
executed, imported, unpickled or rendered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import posixpath
from pathlib import Path, PurePosixPath

from dflash_guard import fileio, rules
from dflash_guard.errors import InputError
from dflash_guard.fileio import loads_json, open_binary, read_json, read_regular
from dflash_guard.findings import Finding, RemoteCodeFile, ScanReport
from dflash_guard.pins.fileset import gguf_models
from dflash_guard.pins.folder import Unsafe, list_folder
from dflash_guard.pins.hub import enclosing_repo_folder
from dflash_guard.pins.loaded import EVERY_ENGINE, DeployEngine, partition
from dflash_guard.progress import NO_PROGRESS, Progress, stage
from dflash_guard.scan import allowlist, drafter, generation, tokens, upstream
from dflash_guard.scan.code import channels, reach, remote_code, tokenizer_regex
from dflash_guard.scan.sniff import (
    GGUF_SUFFIXES,
    PICKLE_SUFFIXES,
    SAFETENSORS_SUFFIXES,
    Format,
    sniff,
)
from dflash_guard.scan.weights import binformats, finite, flax_msgpack, gguf, onnx, safetensors
from dflash_guard.scan.weights.safetensors import Header
from dflash_guard.severity import Severity
from dflash_guard.templates import locate as templates

_EXECUTABLE_SUFFIXES = frozenset(
    {".so", ".dll", ".dylib", ".pyd", ".pyc", ".pyo", ".exe", ".sh", ".bat", ".cmd", ".ps1"}
)
_EXECUTABLE_MAGIC = (
    b"\x7fELF",
    b"MZ",
    b"\xcf\xfa\xed\xfe",
    b"\xce\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",
    b"#!",
)
# safetensors findings that mean the loader would not read the file as safetensors at all.
_ST_BROKEN = frozenset(
    {rules.ST_TRUNCATED.id, rules.ST_LENGTH.id, rules.ST_HEADER.id, rules.ST_DUPLICATE_KEY.id,
     rules.ST_TENSOR.id, rules.ST_TRAILING.id, rules.ST_POLYGLOT.id, rules.ST_INVALID.id,
     rules.UNSCANNABLE.id}
)
_TEMPLATE_CONFIGS = frozenset(
    {"tokenizer_config.json", "chat_template.json", "processor_config.json"}
)
# Every config file a loader reads a code reference from (`channels.CHANNELS`).
_CODE_CONFIGS = channels.AUTO_MAP_CONFIGS | {"adapter_config.json", "modules.json",
                                              "audio_tokenizer_config.json"}


class _Run:
    def __init__(self, reviewed: frozenset[str], reviewed_templates: frozenset[str],
                 reviewed_files: frozenset[str] = frozenset()) -> None:
        self.reviewed = reviewed
        self.reviewed_templates = reviewed_templates
        self.reviewed_files = reviewed_files  # generation configs' and GGUFs' (sampling)
        self.findings: list[Finding] = []
        self.remote_code: dict[str, RemoteCodeFile] = {}
        self.pickle_files: list[str] = []
        self.param_count: int | None = None
        self.shapes: dict[str, list[int]] = {}  # tensor name -> shape, of the folder in hand
        self.weights: list[tuple[Path, str, Header]] = []  # complete safetensors, same folder
        self.files = 0
        self.onnx: dict[str, onnx.OnnxModel] = {}  # by file path
        self.onnx_data: set[str] = set()  # paths of files an accepted ONNX model stores data in
        # Of the folder in hand: its Python sources by shown path, and the class names its
        # loader channels build (`code.reach`).
        self.sources: dict[str, bytes] = {}
        self.entries: set[str] = set()
        self.whole: set[str] = set()  # modules a loader calls a function of by name

    def onnx_model(self, path: Path, relative: str | None = None, root: Path | None = None,
                   listing: frozenset[str] = frozenset()) -> onnx.OnnxModel:
        """The verdict on the ONNX file `path` (at `relative` in the folder `root` whose files
        are `listing`), computed once; its external data files are remembered."""
        if str(path) not in self.onnx:
            model = onnx.check_onnx(path, relative, listing)
            self.onnx[str(path)] = model
            if model.problem is None and root is not None:
                self.onnx_data.update(str(root / data) for data in model.data_files)
        return self.onnx[str(path)]

    def scan_file(self, path: Path, display: str, loaded_as: str | None = None) -> None:
        """Route one file to its detectors. `loaded_as`: how a weight index makes a loader read
        it (`pickle` or `safetensors`), whatever its name. A file that no allowlisted format
        accepts completely is a possible pickle (`possible_pickle`)."""
        self.files += 1
        name, suffix = path.name, path.suffix.lower()
        if suffix == ".py" and loaded_as is None:
            self.python_file(path, display)
            return
        if loaded_as == "pickle":
            self.possible_pickle(path, display, "a weight index makes torch.load read it")
            return
        if name in _TEMPLATE_CONFIGS:
            self.findings += templates.scan_config_templates(path, display,
                                                             self.reviewed_templates)
        if name in _CODE_CONFIGS:
            self.code_channels(path, display)
        if name.endswith(".index.json"):  # safetensors', pytorch_model.bin's, any weight index
            self.findings += safetensors.check_index(path, display)
        if suffix == ".jinja":
            self.findings += templates.scan_jinja_file(path, display, self.reviewed_templates)
        if suffix == ".json" and loaded_as is None:  # any name a config could point at
            self.findings += tokenizer_regex.check_tokenizer_json(path, display)
        try:
            problem = self.identify(path, display, suffix, loaded_as)
        except OSError as error:
            self.unscannable(display, f"cannot read: {error}")
            problem = f"cannot read: {error}"
        if problem is not None:
            self.possible_pickle(path, display, problem)
        else:
            self.executable(path, display, suffix)

    def identify(self, path: Path, display: str, suffix: str, loaded_as: str | None) -> str | None:
        """None when the file is positively one of the allowlisted formats and parses
        completely as it; else why not."""
        fmt = sniff(path)
        if loaded_as == "safetensors" or suffix in SAFETENSORS_SUFFIXES or (
                fmt is Format.safetensors):
            return self.safetensors(path, display, fmt)
        if suffix in GGUF_SUFFIXES or fmt is Format.gguf:
            findings = gguf.scan_gguf_file(path, display, self.reviewed_templates,
                                           self.reviewed_files)
            self.findings += findings
            broken = {rules.GGUF_MALFORMED.id, rules.UNSCANNABLE.id}
            return "not a valid GGUF file" if any(f.rule_id in broken for f in findings) else None
        if fmt is Format.numpy:
            return allowlist.npy_file_problem(path)
        parsed = self.parsed_binary(path, display, fmt, suffix)
        if parsed is not None:
            return parsed or None
        if fmt is not Format.unknown or suffix in PICKLE_SUFFIXES:
            return f"{fmt.value} content" if fmt is not Format.unknown else "a pickle-family name"
        if str(path) in self.onnx_data and suffix not in (".json", ".jsonl"):
            if self.probe_pickle(path, display):
                return "ONNX external data that an unpickler also reads as a pickle"
            return None  # raw tensor bytes of an accepted model, no pickle stream in them
        if suffix in (".json", ".jsonl"):
            return _json_problem(path, lines=suffix == ".jsonl")
        problem = allowlist.text_problem(path)
        if problem is None and self.probe_pickle(path, display):
            return "text that an unpickler reads as a pickle"
        return problem

    def parsed_binary(self, path: Path, display: str, fmt: Format, suffix: str) -> str | None:
        """For a file shaped like a numeric `.npz`, an image, (named `.model`) a tiktoken rank
        file or a sentencepiece model, (named `.msgpack`) a flax checkpoint or (named `.onnx`)
        an ONNX model: "" when it parses whole as that format and holds no pickle stream, else
        why not; None when it is shaped like none of them (`weights.binformats`,
        `weights.flax_msgpack`, `weights.onnx`)."""
        with open_binary(path) as handle:
            head = handle.read(12)
        kind = binformats.image_kind(head)
        if fmt is Format.zip:
            problem, what = binformats.npz_problem(path), "a numeric .npz"
        elif kind is not None:
            problem, what = binformats.image_problem(path, kind), f"a {kind} image"
        elif suffix == ".model" and fmt is Format.unknown and (
                binformats.tiktoken_problem(path) is None):
            problem, what = None, "a tiktoken rank file"
        elif suffix == ".model" and fmt is Format.unknown:
            problem, what = binformats.sentencepiece_problem(path), "a sentencepiece model"
        elif suffix == ".msgpack" and fmt is Format.unknown:
            problem, what = flax_msgpack.msgpack_problem(path), "a flax msgpack checkpoint"
        elif suffix == ".onnx" and fmt is Format.unknown:
            problem, what = self.onnx_model(path).problem, "an ONNX model"
        else:
            return None
        if problem is not None:
            return f"not {what}: {problem}"
        if self.probe_pickle(path, display):
            return f"{what} that an unpickler also reads as a pickle"
        return ""

    def possible_pickle(self, path: Path, display: str, why: str) -> None:
        """A file no allowlisted format accepts: scanned for every pickle stream a loader could
        read, counted with the pickle files, and reported high unless it is a pickle whose
        every stream was read to its end."""
        # pickletools, zipfile, modelscan: loaded only when a pickle is met
        from dflash_guard.scan.pickle.scan import scan_pickle_file

        findings = scan_pickle_file(path, display, probe=path.suffix.lower() not in PICKLE_SUFFIXES)
        self.findings += findings
        self.pickle_files.append(display)
        self.executable(path, display, path.suffix.lower())
        ids = {f.rule_id for f in findings}
        complete = rules.PICKLE_PRESENT.id in ids and not ids & {
            rules.UNSCANNABLE.id, rules.PICKLE_INVALID.id}
        if not complete:
            self.add(Finding.of(
                rules.FORMAT_UNKNOWN, display,
                f"not positively identified as a format no loader unpickles ({why}): a "
                "possible pickle", detector="scan"))

    def probe_pickle(self, path: Path, display: str) -> bool:
        """Whether text holds a pickle stream that imports something (protocol 0 is text)."""
        from dflash_guard.scan.pickle.scan import scan_pickle_file

        findings = scan_pickle_file(path, display, probe=True)
        self.findings += findings
        # modelscan's own notes (it cannot read an .npz, say) are not a pickle stream
        return any(f.detector != "modelscan" or f.severity >= Severity.medium for f in findings)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def unscannable(self, display: str, message: str, detector: str = "scan") -> None:
        self.add(Finding(rules.UNSCANNABLE.id, Severity.high, display, message, detector=detector))

    def python_file(self, path: Path, display: str) -> None:
        try:
            source = read_regular(path, fileio.MAX_TEXT_BYTES)
        except (OSError, ValueError) as error:  # unreadable, or over the limit
            self.unscannable(display, f"cannot read: {error}", remote_code.DETECTOR)
            return
        digest = hashlib.sha256(source).hexdigest()
        reviewed = digest in self.reviewed
        self.remote_code[display] = RemoteCodeFile(display, digest, reviewed)
        self.sources[display] = source
        if PurePosixPath(display).parts[-2:] == ("custom_generate", "generate.py"):
            # transformers/generation/utils.py load_custom_generate: its `generate`, whatever
            # that calls
            self.whole.add(display)
        self.findings += remote_code.check_source(source, display)
        if not reviewed:
            self.add(remote_code.unreviewed(display, digest))

    def code_channels(self, path: Path, display: str) -> None:
        """The code references of a config file (`channels.CHANNELS`)."""
        try:
            config = read_json(path)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            self.add(
                Finding(
                    rules.CONFIG_INVALID.id,
                    Severity.medium,
                    display,
                    f"not readable JSON: {error}",
                    detector="scan",
                )
            )
            return
        library = remote_code.peft_parent_library(config)
        if library is not None:
            self.add(Finding(
                rules.RC_NESTED_REMOTE_CODE.id, Severity.high, display,
                f"auto_mapping makes PEFT import {library[:80]!r} by name and load from it",
                detector=remote_code.DETECTOR))
        if path.name == "modules.json":
            for module_path in channels.module_paths(config):
                parts = PurePosixPath(module_path.replace("\\", "/")).parts
                if module_path.startswith(("/", "\\")) or ".." in parts or ":" in module_path:
                    self.add(Finding(
                        rules.RC_MISSING.id, Severity.high, display,
                        f"modules.json loads a module from {module_path[:120]!r}, outside the "
                        "folder", detector=remote_code.DETECTOR))
        for key, target in channels.code_references(path.name, config):
            self.code_reference(path, display, key, target)
        for key, target in channels.repository_references(path.name, config):
            # from_pretrained resolves it against the Hub or the process's working directory,
            # never against this folder: another model, unscanned
            self.add(Finding(
                rules.RC_REMOTE_REPO.id, Severity.high, display,
                f"{key} {target[:120]!r} makes the loader read another model, which this scan "
                "cannot see", detector=remote_code.DETECTOR))

    def code_reference(self, path: Path, display: str, key: str, target: str) -> None:
        """A class reference a loader imports (`key` says which channel): its module must be a
        file in the folder (reviewed code); another repository or a missing file is high."""
        repo, _, reference = target.rpartition("--")
        module_name, _, class_name = reference.rpartition(".")
        self.entries.add(class_name)
        if not repo and not module_name.replace("_", "a").replace(".", "a").isalnum():
            self.add(Finding(
                rules.RC_MISSING.id, Severity.high, display,
                f"{key} {target[:120]!r} names a module outside the folder",
                detector=remote_code.DETECTOR))
            return
        module = module_name.replace(".", "/") + ".py"
        if repo:
            entry = f"{repo}--{module}"
            self.remote_code.setdefault(entry, RemoteCodeFile(entry, "", False))
            self.add(Finding(
                rules.RC_REMOTE_REPO.id, Severity.high, display,
                f"{key} {target!r} loads code from the repository {repo!r}, which this scan "
                "cannot see", detector=remote_code.DETECTOR, repo=repo))
            return
        local = path.parent / module
        shown = str(Path(display).parent / module)
        if not local.is_file():
            self.remote_code.setdefault(shown, RemoteCodeFile(shown, "", False))
            self.add(Finding(
                rules.RC_MISSING.id, Severity.high, display,
                f"{key} {target!r} needs {module}, which is not in the folder (a loader would "
                "fetch unscanned code or import an installed module by that name)",
                detector=remote_code.DETECTOR))

    def place_code_findings(self, whole: bool) -> None:
        """Say of each capability finding in the folder's Python whether the loader reaches it
        (`code.reach`); unreached ones are low. `whole`: every function counts as reached."""
        if not self.sources:
            return
        entries = None if whole or not (self.entries or self.whole) else self.entries
        self.findings = reach.place_findings(self.findings, self.sources, entries,
                                             frozenset(self.whole))
        self.sources, self.entries, self.whole = {}, set(), set()

    def safetensors(self, path: Path, display: str, fmt: Format) -> str | None:
        findings, header = safetensors.check_safetensors(path, display)
        self.findings += findings
        if header is not None:
            self.param_count = (self.param_count or 0) + header.param_count
            self.shapes.update({name: list(entry.get("shape") or [])
                                for name, entry in header.tensors.items()})
        if fmt is Format.pickle and self.probe_pickle(path, display):
            return "safetensors bytes that an unpickler also reads as a pickle"
        if header is None or any(f.rule_id in _ST_BROKEN for f in findings):
            return "not a complete safetensors file"
        self.weights.append((path, display, header))
        return None

    def executable(self, path: Path, display: str, suffix: str) -> None:
        try:
            with open_binary(path) as handle:
                head = handle.read(4)
        except OSError as error:
            self.unscannable(display, f"cannot read: {error}")
            return
        if suffix in _EXECUTABLE_SUFFIXES or head.startswith(_EXECUTABLE_MAGIC):
            self.add(
                Finding(
                    rules.EXECUTABLE.id,
                    Severity.high,
                    display,
                    "native executable, shared library, script or bytecode: not "
                    "scannable, and nothing a checkpoint needs",
                    detector="scan",
                )
            )


def _files(root: Path) -> tuple[list[tuple[str, Path]], list[Unsafe]]:
    """The regular files under `root` by relative path, and the entries not followed.

    The same walk as `lock` and `verify` (`folder.list_folder`), so what is locked is what is
    scanned. It refuses symlinked folders, dangling links, special files and links out of the
    folder (or, for an HF-cache snapshot, out of its repo folder); those are reported.
    """
    found, unsafe = list_folder(root, enclosing_repo_folder(root.resolve()))
    return [(rel, Path(path)) for rel, path in sorted(found.items())], unsafe


def display_names(paths: list[Path]) -> list[str]:
    """How each of several scanned paths prefixes its files in a report: its name, or as many
    trailing parts of its path as tell it from the others (`a/drafter`, `b/drafter`), so two
    folders with one name never share (and merge) their findings."""
    parts = [Path(p).parts or Path(p).resolve().parts for p in paths]
    taken = [1] * len(paths)
    while True:
        shown = ["/".join(p[-k:]) for p, k in zip(parts, taken, strict=True)]
        clashing = [i for i, name in enumerate(shown)
                    if shown.count(name) > 1 and taken[i] < len(parts[i])]
        if not clashing:
            return shown
        for i in clashing:
            taken[i] += 1


def scan_paths(
    paths: list[Path],
    *,
    target: Path | None = None,
    reviewed_sha256: frozenset[str] = frozenset(),
    reviewed_templates: frozenset[str] = frozenset(),
    reviewed_files: frozenset[str] = frozenset(),
    param_budget: int | None = None,
    engines: tuple[DeployEngine, ...] = (),
    finite_weights: bool = False,
    upstream_folder: Path | None = None,
    progress: Progress = NO_PROGRESS,
) -> ScanReport:
    """Scan files and folders (a checkpoint, an HF cache snapshot, a locked role).

    `target` is the target model's folder, against which every drafter config found is checked;
    `reviewed_sha256` the digests of reviewed code files, `reviewed_templates` of reviewed chat
    templates (the catalog's published ones need none), `reviewed_files` of reviewed generation
    configs (`generation`) and GGUFs (their sampling metadata: `gguf_sampling`); `engines` the
    deploy's (the lock's: `pins.loaded.deploy_engines`; none: every modelled engine), which
    decide the files of each folder that are loaded (judged by every check) and those no engine
    opens (scanned, reported apart at low, blocking nothing, left out of the inventories);
    `finite_weights`: every float of each folder's loaded safetensors is read, a NaN or an
    infinity being DG-WEIGHTS-NONFINITE (a drafter's always are, as DG-DRAFTER-WEIGHTS);
    `upstream_folder` the model's upstream (the policy's, verified), against which each folder's
    tokenizer, generation and template files are compared (none: the catalog; `upstream`); each
    folder is a stage of `progress` (`scanning PATH`, in files). Raises `InputError` when a
    path (or the target) does not exist.
    """
    for path in [*paths, *([target] if target is not None else [])]:
        if not Path(path).exists():
            raise InputError(f"{path}: no such file or folder")
        if not (Path(path).is_file() or Path(path).is_dir()):
            raise InputError(f"{path}: not a regular file or folder")
    if target is not None and not Path(target).is_dir():
        raise InputError(f"{target}: --target must be a model folder")
    if upstream_folder is not None and not Path(upstream_folder).is_dir():
        raise InputError(f"{upstream_folder}: --upstream must be a model folder")
    run = _Run(frozenset(reviewed_sha256), frozenset(reviewed_templates),
               frozenset(reviewed_files))
    # the files no engine of the deploy opens: scanned by a run of their own, whose inventories
    # (pickle files, remote code, parameters, shapes) are dropped and whose findings block nothing
    aside = _Run(run.reviewed, run.reviewed_templates, run.reviewed_files)
    aside.onnx, aside.onnx_data = run.onnx, run.onnx_data
    judged: tuple[str, ...] = tuple(e.label for e in engines)
    loaded_files: list[str] = []
    not_loaded: dict[str, str] = {}
    folders: list[tuple[Path, str, dict[str, list[int]], list[tuple[Path, str, Header]]]] = []
    roots: list[tuple[str, str]] = []
    names = display_names(paths) if len(paths) > 1 else [""] * len(paths)
    for raw, prefix in zip(paths, names, strict=True):
        root = Path(raw)
        if root.is_file():
            run.scan_file(root, str(raw))
            if root.name == generation.NAME:
                run.findings += generation.file_findings(root, str(raw), reviewed_files)
            run.place_code_findings(whole=True)
            roots.append((str(raw), str(raw)))
            loaded_files.append(str(raw))  # a file given alone is judged whole
            continue
        roots.append((prefix, str(raw)))
        files, unsafe = _files(root)
        loaded_as = _index_shards(files)
        listing = frozenset(relative for relative, _ in files)
        loading = partition(root, listing, engines)
        judged = loading.engines
        shown_as = {relative: f"{prefix}/{relative}" if prefix else relative
                    for relative in listing}
        loaded_files += [shown_as[relative] for relative in loading.loaded]
        not_loaded.update({shown_as[rel]: why for rel, why in loading.not_loaded.items()})
        for relative, file in files:  # first, so that their external data is known
            if file.suffix.lower() == ".onnx" and loaded_as.get(relative) is None:
                with contextlib.suppress(OSError):  # scan_file reports it
                    run.onnx_model(file, relative, root, listing)
        run.shapes, run.weights = {}, []
        with stage(progress, f"scanning {raw}", len(files), "files"):
            for relative, file in files:
                scanner = aside if relative in loading.not_loaded else run
                scanner.scan_file(file, shown_as[relative], loaded_as.get(relative))
                progress.advanced()
        run.place_code_findings(whole=False)
        aside.place_code_findings(whole=False)
        # a generation config no engine of the deploy reads is not judged for its content
        run.findings += [f for f in generation.folder_findings(
            root, f"{prefix}/" if prefix else "", frozenset(reviewed_files))
            if f.file not in not_loaded]
        run.findings += upstream.upstream_findings(
            root, f"{prefix}/" if prefix else "", loading.loaded, upstream_folder,
            frozenset(reviewed_files))
        if upstream_folder is not None:  # the vocabulary of each GGUF llama.cpp is given
            run.findings += [finding for relative in gguf_models(loading.loaded)
                             for finding in upstream.gguf_findings(
                                 root / relative, shown_as[relative], upstream_folder,
                                 frozenset(reviewed_files))]
        for entry in unsafe:
            shown = f"{prefix}/{entry.path}" if prefix else entry.path
            run.unscannable(shown, f"not scanned: {entry.detail}")
        folders.append((root, f"{prefix}/config.json" if prefix else "config.json", run.shapes,
                        run.weights))
    for root, display, shapes, weights in folders:
        config_path = root / "config.json"
        config = _read_json(config_path)
        run.findings += tokens.meaning_findings(root, display.removesuffix("config.json"))
        if target is not None or drafter.is_drafter_config(config):
            # check_drafter reports a missing config.json itself: --target needs one to compare
            run.findings += drafter.check_drafter(
                root,
                display,
                target=target and Path(target),
                param_count=run.param_count,
                param_budget=param_budget,
                shapes=shapes,
                weights=weights,
            )
        elif finite_weights:  # a target's NaN rows decode alike with and without a drafter
            run.findings += finite.finite_findings(
                weights, rules.WEIGHTS_NONFINITE, safetensors.DETECTOR,
                "every engine loads it and computes NaN wherever it is used, with or without "
                "the drafter alike, so the lossless diff test cannot see it")
    findings = sorted(
        {_not_loaded(f) if f.file in not_loaded else f for f in [*run.findings, *aside.findings]},
        key=lambda f: (f.file, -f.severity, f.rule_id, f.member or "", f.line or 0, f.message),
    )
    return ScanReport(
        findings,
        sorted(run.remote_code.values(), key=lambda r: r.path),
        run.pickle_files,
        run.param_count,
        run.files + aside.files,
        roots=tuple(roots),
        engines=judged or tuple(e.label for e in EVERY_ENGINE),
        every_engine=not engines,
        loaded_files=tuple(loaded_files),
        not_loaded=not_loaded,
    )


def _not_loaded(finding: Finding) -> Finding:
    """A finding in a file no engine of the deploy opens: low, its own severity said."""
    if finding.severity <= Severity.low:
        return finding
    return dataclasses.replace(finding, severity=Severity.low,
                               message=f"({finding.severity.name} were it loaded) "
                                       f"{finding.message}")


def _index_shards(files: list[tuple[str, Path]]) -> dict[str, str]:
    """Every file a weight index names, found as loaders find it (any suffix), with how its
    loader reads it: `safetensors` for a safetensors index, else `pickle` (torch.load)."""
    shards: dict[str, str] = {}
    for relative, path in files:
        if not relative.endswith(".index.json"):
            continue
        index = _read_json(path)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            continue
        kind = "safetensors" if ".safetensors." in path.name else "pickle"
        folder = PurePosixPath(relative).parent
        for shard in weight_map.values():
            if isinstance(shard, str):
                named = posixpath.normpath(str(folder / shard))
                shards[named] = "pickle" if shards.get(named) == "pickle" else kind
    return shards


def _json_problem(path: Path, *, lines: bool) -> str | None:
    """Why `path` is not JSON (or, for `lines`, JSON Lines), or None."""
    try:
        if not lines:
            read_json(path)
            return None
        text = read_regular(path, fileio.MAX_TEXT_BYTES).decode("utf-8")
        for line in text.splitlines():
            if line.strip():
                loads_json(line)
    except (UnicodeDecodeError, ValueError) as error:
        return f"not valid JSON: {error}"
    return None


def _read_json(path: Path) -> object:
    try:
        return read_json(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
