"""`scan_paths`: walk folders and files, hand each file to its detector, collect a report.

Files are routed by name and by content: a pickle named `.safetensors`, a zip named `.bin` or a
pickle with an unusual extension all reach the pickle detector. Nothing is executed, imported,
unpickled or rendered.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dflash_guard.errors import InputError
from dflash_guard.pins.folder import Unsafe, list_folder
from dflash_guard.pins.hub import enclosing_repo_folder
from dflash_guard.scan import (
    drafter_config,
    gguf_check,
    jsonfile,
    remote_code,
    rules,
    safetensors_check,
    templates,
)
from dflash_guard.scan.interface import Finding, RemoteCodeFile, Severity
from dflash_guard.scan.regular import open_regular
from dflash_guard.scan.report import ScanReport
from dflash_guard.scan.sniff import (
    GGUF_SUFFIXES,
    PICKLE_SUFFIXES,
    SAFETENSORS_SUFFIXES,
    Format,
    sniff,
)

_TEXT_SUFFIXES = frozenset(
    {
        ".json",
        ".md",
        ".txt",
        ".yaml",
        ".yml",
        ".gitattributes",
        ".model",
        ".tiktoken",
        ".vocab",
        ".merges",
        ".jsonl",
        ".csv",
        ".lock",
        ".cfg",
        ".toml",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".svg",
    }
)
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
_TEMPLATE_CONFIGS = frozenset(
    {"tokenizer_config.json", "chat_template.json", "processor_config.json"}
)
_AUTO_MAP_CONFIGS = frozenset({"config.json", "tokenizer_config.json"})


class _Run:
    def __init__(self, reviewed: frozenset[str]) -> None:
        self.reviewed = reviewed
        self.findings: list[Finding] = []
        self.remote_code: dict[str, RemoteCodeFile] = {}
        self.pickle_files: list[str] = []
        self.param_count: int | None = None
        self.files = 0

    def scan_file(self, path: Path, display: str) -> None:
        self.files += 1
        name, suffix = path.name, path.suffix.lower()
        if suffix == ".py":
            self.python_file(path, display)
            return
        if name.endswith(".index.json"):  # safetensors', pytorch_model.bin's, any weight index
            self.findings += safetensors_check.check_index(path, display)
            return
        if name in _TEMPLATE_CONFIGS:
            self.findings += templates.scan_config_templates(path, display)
        if name in _AUTO_MAP_CONFIGS:
            self.auto_map(path, display)
        if suffix == ".jinja":
            self.findings += templates.scan_jinja_file(path, display)
            return
        try:
            fmt = sniff(path)
        except OSError as error:
            self.unscannable(display, f"cannot read: {error}")
            return
        if suffix in SAFETENSORS_SUFFIXES or fmt is Format.safetensors:
            self.safetensors(path, display)
            self.pickle(path, display, probe=fmt not in (Format.pickle, Format.zip))
        elif suffix in GGUF_SUFFIXES or fmt is Format.gguf:
            self.findings += gguf_check.scan_gguf_file(path, display)
        elif suffix in PICKLE_SUFFIXES or fmt in (
            Format.pickle,
            Format.zip,
            Format.numpy,
            Format.archive,
        ):
            self.pickle(path, display)
        elif suffix not in _TEXT_SUFFIXES:
            self.pickle(path, display, probe=True)  # torch.load and pickle.load ignore names
            self.executable(path, display, suffix)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def unscannable(self, display: str, message: str, detector: str = "scan") -> None:
        self.add(Finding(rules.UNSCANNABLE.id, Severity.high, display, message, detector=detector))

    def python_file(self, path: Path, display: str) -> None:
        try:
            with open_regular(path) as handle:
                source = handle.read()
        except OSError as error:
            self.unscannable(display, f"cannot read: {error}", remote_code.DETECTOR)
            return
        digest = hashlib.sha256(source).hexdigest()
        reviewed = digest in self.reviewed
        self.remote_code[display] = RemoteCodeFile(display, digest, reviewed)
        self.findings += remote_code.check_source(source, display)
        if not reviewed:
            self.add(remote_code.unreviewed(display, digest))

    def auto_map(self, path: Path, display: str) -> None:
        try:
            config = jsonfile.read(path)
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
        for target in remote_code.auto_map_targets(config):
            repo, _, reference = target.rpartition("--")
            module = reference.rpartition(".")[0].replace(".", "/") + ".py"
            if repo:
                entry = f"{repo}--{module}"
                self.remote_code.setdefault(entry, RemoteCodeFile(entry, "", False))
                self.add(
                    Finding(
                        rules.RC_REMOTE_REPO.id,
                        Severity.high,
                        display,
                        f"auto_map {target!r} loads code from the repository {repo!r}, "
                        "which this scan cannot see",
                        detector=remote_code.DETECTOR,
                    )
                )
                continue
            local = path.parent / module
            shown = str(Path(display).parent / module)
            if not local.is_file():
                self.remote_code.setdefault(shown, RemoteCodeFile(shown, "", False))
                self.add(
                    Finding(
                        rules.RC_MISSING.id,
                        Severity.high,
                        display,
                        f"auto_map {target!r} needs {module}, which is not in the folder "
                        "(a loader would fetch unscanned code)",
                        detector=remote_code.DETECTOR,
                    )
                )

    def safetensors(self, path: Path, display: str) -> None:
        findings, header = safetensors_check.check_safetensors(path, display)
        self.findings += findings
        if header is not None:
            self.param_count = (self.param_count or 0) + header.param_count

    def pickle(self, path: Path, display: str, *, probe: bool = False) -> None:
        from dflash_guard.scan.pickles import scan_pickle_file  # pickletools, zipfile, modelscan

        findings = scan_pickle_file(path, display, probe=probe)
        self.findings += findings
        if any(f.rule_id == rules.PICKLE_PRESENT.id for f in findings):
            self.pickle_files.append(display)

    def executable(self, path: Path, display: str, suffix: str) -> None:
        try:
            with open_regular(path) as handle:
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
    return sorted(found.items()), unsafe


def scan_paths(
    paths: list[Path],
    *,
    target: Path | None = None,
    reviewed_sha256: frozenset[str] = frozenset(),
    param_budget: int | None = None,
) -> ScanReport:
    """Scan files and folders (a checkpoint, an HF cache snapshot, a locked role).

    `target` is the target model's folder, against which every drafter config found is checked.
    Raises `InputError` when a path (or the target) does not exist.
    """
    for path in [*paths, *([target] if target is not None else [])]:
        if not Path(path).exists():
            raise InputError(f"{path}: no such file or folder")
        if not (Path(path).is_file() or Path(path).is_dir()):
            raise InputError(f"{path}: not a regular file or folder")
    if target is not None and not Path(target).is_dir():
        raise InputError(f"{target}: --target must be a model folder")
    run = _Run(frozenset(reviewed_sha256))
    folders: list[tuple[Path, str]] = []
    for raw in paths:
        root = Path(raw)
        prefix = root.name if len(paths) > 1 else ""
        if root.is_file():
            run.scan_file(root, str(raw))
            continue
        files, unsafe = _files(root)
        for relative, file in files:
            run.scan_file(file, f"{prefix}/{relative}" if prefix else relative)
        for entry in unsafe:
            shown = f"{prefix}/{entry.path}" if prefix else entry.path
            run.unscannable(shown, f"not scanned: {entry.detail}")
        folders.append((root, f"{prefix}/config.json" if prefix else "config.json"))
    for root, display in folders:
        config_path = root / "config.json"
        config = _read_json(config_path)
        if target is not None or drafter_config.is_drafter_config(config):
            # check_drafter reports a missing config.json itself: --target needs one to compare
            run.findings += drafter_config.check_drafter(
                root,
                display,
                target=target and Path(target),
                param_count=run.param_count,
                param_budget=param_budget,
            )
    findings = sorted(
        set(run.findings),
        key=lambda f: (f.file, -f.severity, f.rule_id, f.member or "", f.line or 0, f.message),
    )
    return ScanReport(
        findings,
        sorted(run.remote_code.values(), key=lambda r: r.path),
        run.pickle_files,
        run.param_count,
        run.files,
    )


def _read_json(path: Path) -> object:
    try:
        return jsonfile.read(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
