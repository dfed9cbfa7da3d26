"""Safe file access for inputs and outputs: the one reader for every file the tool is handed.

Inputs (policies, records, signatures, prompts, feeds, lockfiles, configs) go through
`read_input` / `read_input_text` / `read_input_json`: a regular file (a FIFO, device or socket is
refused, never opened blocking), at most a byte cap, JSON no deeper than the parser's limit,
and every failure is one `InputError` line naming what the file was for. `open_binary` is the
same check for streaming readers (the scanner). Partial files are created with `create_exclusive`
(`O_EXCL | O_NOFOLLOW`: never through a planted link, never over an existing file).

Outputs (a lockfile, report, approval) are written whole or not at all, only over a regular file
(never through a symlink, onto a device or a FIFO), with the mode a plain `open()` would give.
Inputs are opened without blocking and checked to be regular files after opening (`fstat`), so a
FIFO or a device swapped in for a file is refused, never read forever.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from dflash_guard.errors import InputError, WriteError


class NotRegularFileError(InputError, OSError):
    """An input that is a FIFO, device, socket or folder where a regular file was expected. An
    input error for the CLI, and an `OSError` for callers that treat any unreadable file alike."""


class MalformedInputError(InputError, ValueError):
    """An input over its size cap, not UTF-8, or not the JSON it should be. An input error for
    the CLI, and a `ValueError` for the scanner, which reports it as a finding."""


class DuplicateKeyError(MalformedInputError):
    """A JSON object repeats a key (two parsers could read two different documents)."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, for a message: `a FIFO`, `a folder`, `a symlink`..."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a special file"


# The files (device, inode) a command has read through this module, while `guard_inputs` is
# active (the CLI runs every command inside it): `write_atomic` never replaces one of them, so
# no output of a command can replace one of its inputs, whichever option named it.
_read_files: set[tuple[int, int]] | None = None


@contextlib.contextmanager
def guard_inputs() -> Iterator[None]:
    """Within the block, refuse to write over any file read through this module."""
    global _read_files
    outer, _read_files = _read_files, set()
    try:
        yield
    finally:
        _read_files = outer


def open_regular(path: str | os.PathLike[str], *, nofollow: bool = False) -> int:
    """A read-only descriptor on `path`, opened without blocking (a FIFO cannot hang us) and
    checked with `fstat` to be a regular file; `nofollow` also refuses a symlink."""
    return open_regular_stat(path, nofollow=nofollow)[0]


def open_regular_stat(path: str | os.PathLike[str], *,
                      nofollow: bool = False) -> tuple[int, os.stat_result]:
    """`open_regular`, with the `fstat` it took of the open file (a hasher keys its stat cache
    with it: no second stat)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if nofollow else 0)
    fd = os.open(path, flags)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotRegularFileError(f"{path}: {file_kind(info.st_mode)}, not a regular file")
    if _read_files is not None:
        _read_files.add((info.st_dev, info.st_ino))
    return fd, info


def read_regular(path: str | os.PathLike[str], limit: int, *, nofollow: bool = False) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; larger is a `MalformedInputError`
    (nothing unbounded is read, so `/dev/zero` or a huge file cannot exhaust memory). `OSError`
    (`NotRegularFileError` for a FIFO, device or folder) when it cannot be read."""
    with os.fdopen(open_regular(path, nofollow=nofollow), "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise MalformedInputError(f"{path}: larger than {limit:,} bytes")
    return data


def open_binary(path: str | os.PathLike[str]) -> BinaryIO:
    """`path` opened for binary reading as a file object; `NotRegularFileError` (an `OSError`)
    when it is not a regular file."""
    return os.fdopen(open_regular(path), "rb")


SMALL_INPUT_BYTES = 16 * 1024 * 1024  # policies, records, signatures, keys
MAX_JSON_BYTES = 64 * 1024 * 1024  # far above any real config, index or tokenizer_config
MAX_TEXT_BYTES = 256 * 1024 * 1024  # over this a file is not read as text (a tokenizer is ~30 MB)


def read_input(path: str | os.PathLike[str], what: str, limit: int = SMALL_INPUT_BYTES) -> bytes:
    """The bytes of an input file, or one readable `InputError` naming `what` (`policy`,
    `approval record`...): missing, unreadable, not a regular file, or over `limit` bytes."""
    try:
        return read_regular(path, limit)
    except InputError as error:
        raise InputError(f"cannot read {what} {error}") from None
    except OSError as error:
        raise InputError(f"cannot read {what} {path}: {error.strerror or error}") from None


def read_input_text(path: str | os.PathLike[str], what: str,
                    limit: int = SMALL_INPUT_BYTES) -> str:
    """`read_input` decoded as UTF-8 (anything else is an `InputError`)."""
    try:
        return read_input(path, what, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"cannot read {what} {path}: not UTF-8 text") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]!r} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: set[str] = set()
    for key, _ in pairs:  # linear: `keys.count` per key was quadratic on a hostile header
        if key in seen:
            raise DuplicateKeyError(f"duplicate JSON key {key!r}")
        seen.add(key)
    return dict(pairs)


def loads_json(text: str | bytes, what: str | None = None, *, finite: bool = False,
               strict: bool = False) -> object:
    """JSON from untrusted text: bad JSON, nesting past the parser's recursion limit (about a
    thousand levels: the depth cap) or an integer past Python's digit limit is one
    `MalformedInputError` naming `what` (when given). `finite`: `NaN`, `Infinity` and a number
    too large for a float (`1e400`) are errors too, for documents whose numbers are compared.
    `strict`: a key repeated at any depth is a `DuplicateKeyError`."""
    where = f"{what}: " if what else ""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedInputError(f"{where}not UTF-8 JSON") from None
    hooks: dict[str, Any] = {"object_pairs_hook": _no_duplicates} if strict else {}
    if finite:
        hooks.update(parse_float=_finite_float, parse_constant=_no_constant)
    try:
        return json.loads(text, **hooks)
    except DuplicateKeyError as error:
        raise DuplicateKeyError(f"{where}{error}") from None
    except RecursionError:
        raise MalformedInputError(f"{where}not valid JSON (nested too deeply to parse)") from None
    except ValueError as error:  # JSONDecodeError, huge ints
        raise MalformedInputError(
            f"{where}not valid JSON ({str(error).splitlines()[0]})") from None


def read_json(path: str | os.PathLike[str], *, limit: int | None = None,
              strict: bool = False) -> object:
    """The JSON document in the regular file `path`, for a reader that tells an unreadable file
    from a malformed one (the scanner): `OSError` when it cannot be read or is not a regular
    file (a FIFO is never opened blocking), `MalformedInputError` (a `ValueError`) when it is
    over `limit` bytes (None: `MAX_JSON_BYTES`), not UTF-8 or not JSON (`loads_json`)."""
    return loads_json(read_regular(path, MAX_JSON_BYTES if limit is None else limit),
                      strict=strict)


def read_input_json(path: str | os.PathLike[str], what: str,
                    limit: int = SMALL_INPUT_BYTES) -> object:
    """The JSON document in an input file (`read_input`, then `loads_json`)."""
    return loads_json(read_input(path, what, limit), f"{what} {path}")


def create_exclusive(path: str | os.PathLike[str]) -> int:
    """A new file for writing, created with `O_EXCL | O_NOFOLLOW` and mode 0600: an existing
    file or a planted symlink at `path` is an `OSError` (`FileExistsError`), never written."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path, flags, 0o600)


def _creation_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0o666 less the umask."""
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *,
                 own_state: bool = False) -> None:
    """Write `data` to `path` through a temporary file in the same folder and `os.replace`.

    Only a regular file (or nothing) is replaced; it keeps its mode, a new file gets the umask's.
    A failure leaves `path` as it was and raises `WriteError` naming it. Within `guard_inputs`,
    a file the command read is never replaced, unless it is the tool's `own_state` (its cache)."""
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    try:
        try:
            existing = os.lstat(target).st_mode
        except FileNotFoundError:
            existing = None
        if existing is not None and not stat.S_ISREG(existing):
            raise WriteError(f"cannot write {target}: it is {file_kind(existing)}; refusing to "
                             "replace anything but a regular file")
        if existing is not None and _read_files is not None and not own_state:
            info = os.stat(target)
            if (info.st_dev, info.st_ino) in _read_files:
                raise WriteError(f"cannot write {target}: this command read it as an input; "
                                 "refusing to overwrite an input")
        mode = stat.S_IMODE(existing) if existing is not None else _creation_mode()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), mode)
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except WriteError:
        raise
    except OSError as error:
        raise WriteError(f"cannot write {target}: {error.strerror or error}") from None
