"""A small ctypes layer over Linux Landlock: probe the ABI, build a ruleset, enforce it.

Landlock is the kernel's unprivileged access control: a process restricts itself (and every
child it will ever have) to a ruleset, and cannot lift it. Rights a ruleset *handles* are denied
except where a rule allows them: a path rule names a folder (the rights hold beneath it) or a
single file (file rights only), by the inode opened when the rule is added; a port rule allows
TCP bind or connect on one port (ABI 4); scoping (ABI 6) keeps abstract unix sockets and
signals inside the domain. `stat` is never restricted and UDP is not covered.

The PyPI `landlock` binding has no network rules and no scoping, hence this layer. `Ruleset` is
the plain description (its `digest` names it in a serving record); `Ruleset.build` opens every
path and returns a `BuiltRuleset` holding the kernel's ruleset descriptor, whose `enforce`
restricts the calling thread (call it right before exec, or as a `preexec_fn`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import functools
import hashlib
import json
import os
import platform
import stat
import sys
from collections.abc import Iterable

# create_ruleset, add_rule, restrict_self: the same numbers on every architecture that uses
# the generic syscall table (x86_64 kept its own table, where they are also 444-446)
SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446), "riscv64": (444, 445, 446)}
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38


class Fs(enum.IntFlag):
    """LANDLOCK_ACCESS_FS_*."""

    EXECUTE = 1 << 0
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13  # ABI 2
    TRUNCATE = 1 << 14  # ABI 3
    IOCTL_DEV = 1 << 15  # ABI 5


class Net(enum.IntFlag):
    """LANDLOCK_ACCESS_NET_* (ABI 4)."""

    BIND_TCP = 1 << 0
    CONNECT_TCP = 1 << 1


class Scope(enum.IntFlag):
    """LANDLOCK_SCOPE_* (ABI 6)."""

    ABSTRACT_UNIX_SOCKET = 1 << 0
    SIGNAL = 1 << 1


FS_BY_ABI = {1: Fs(0x1FFF), 2: Fs(0x3FFF), 3: Fs(0x7FFF), 4: Fs(0x7FFF), 5: Fs(0xFFFF)}
FILE_RIGHTS = Fs.EXECUTE | Fs.WRITE_FILE | Fs.READ_FILE | Fs.TRUNCATE | Fs.IOCTL_DEV
READ = Fs.READ_FILE | Fs.READ_DIR
READ_EXEC = READ | Fs.EXECUTE
ALL_FS = FS_BY_ABI[5]


class LandlockError(OSError):
    """The kernel refused a Landlock call (or there is no Landlock here)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


@functools.cache
def _libc() -> ctypes.CDLL:
    """libc, loaded once with its two functions looked up: `enforce` may run in a child
    between fork and exec (a `preexec_fn`), where loading a library could deadlock."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _syscall(index: int, *args: object) -> int:
    numbers = SYSCALLS.get(platform.machine())
    if sys.platform != "linux" or numbers is None:
        raise LandlockError(95, f"no Landlock on {sys.platform}/{platform.machine()}")
    result = int(_libc().syscall(numbers[index], *args))
    if result < 0:
        code = ctypes.get_errno()
        raise LandlockError(code, os.strerror(code))
    return result


def abi_version() -> int | None:
    """The kernel's Landlock ABI, or None where there is none (not Linux, an architecture this
    layer does not know, a kernel built or booted without it)."""
    try:
        return _syscall(0, None, 0, CREATE_RULESET_VERSION)
    except LandlockError:
        return None


def _names(flags: enum.IntFlag) -> list[str]:
    return sorted(f.name for f in type(flags) if f in flags and f.name)


@dataclasses.dataclass(frozen=True)
class PathRule:
    """`access` on `path`: a folder (beneath it) or a single file (file rights only)."""

    path: str
    access: Fs


@dataclasses.dataclass(frozen=True)
class PortRule:
    """TCP `access` on `port` (any address: Landlock rules are by port)."""

    port: int
    access: Net


@dataclasses.dataclass(frozen=True)
class Ruleset:
    """What a confined process may do: every filesystem right, TCP bind and connect, and (with
    `scoped`) abstract unix sockets and signals are denied except as the rules allow."""

    paths: tuple[PathRule, ...]
    ports: tuple[PortRule, ...]
    scoped: bool = True

    def to_json(self) -> dict[str, object]:
        """The rules in a canonical order (rights by name), what `digest` hashes."""
        paths: dict[str, Fs] = {}
        for rule in self.paths:
            paths[rule.path] = paths.get(rule.path, Fs(0)) | rule.access
        ports: dict[int, Net] = {}
        for port in self.ports:
            ports[port.port] = ports.get(port.port, Net(0)) | port.access
        return {"paths": [{"path": p, "access": _names(a)} for p, a in sorted(paths.items())],
                "tcp_ports": [{"port": p, "access": _names(a)} for p, a in sorted(ports.items())],
                "scoped": _names(Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) if self.scoped
                else []}

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON of the rules: the same rules, the same digest."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def build(self, abi: int | None = None) -> BuiltRuleset:
        """The kernel ruleset: every path opened now (a rule holds that inode, whatever the
        path names later). Raises `LandlockError` where the kernel cannot enforce the rules
        (no Landlock, or no network rules with port rules given)."""
        abi = abi_version() if abi is None else abi
        if abi is None:
            raise LandlockError(95, "this kernel has no Landlock")
        if self.ports and abi < 4:
            raise LandlockError(95, f"Landlock ABI {abi} has no TCP rules (ABI 4 does)")
        handled_fs = FS_BY_ABI[min(abi, 5)]
        attr = _RulesetAttr(int(handled_fs), int(Net.BIND_TCP | Net.CONNECT_TCP) if abi >= 4
                            else 0, int(Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL)
                            if self.scoped and abi >= 6 else 0)
        size = 24 if abi >= 6 else 16 if abi >= 4 else 8
        fd = _syscall(0, ctypes.byref(attr), size, 0)
        try:
            for rule in self.paths:
                _add_path(fd, rule, handled_fs)
            for port in self.ports:
                net = _NetPortAttr(int(port.access), port.port)
                _syscall(1, fd, RULE_NET_PORT, ctypes.byref(net), 0)
        except BaseException:
            os.close(fd)
            raise
        return BuiltRuleset(self, fd, abi)


def _add_path(fd: int, rule: PathRule, handled: Fs) -> None:
    try:
        target = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
    except OSError as error:
        raise LandlockError(error.errno, f"{rule.path}: {error.strerror}") from None
    try:
        access = rule.access & handled
        if not stat.S_ISDIR(os.fstat(target).st_mode) and access & ~FILE_RIGHTS:
            raise LandlockError(22, f"{rule.path}: a file takes file rights only")
        attr = _PathBeneathAttr(int(access), target)
        try:
            _syscall(1, fd, RULE_PATH_BENEATH, ctypes.byref(attr), 0)
        except LandlockError as error:
            raise LandlockError(error.errno, f"{rule.path}: {error.strerror}") from None
    finally:
        os.close(target)


@dataclasses.dataclass
class BuiltRuleset:
    """A kernel ruleset ready to enforce (its descriptor closes on exec)."""

    rules: Ruleset
    fd: int
    abi: int

    def enforce(self) -> None:
        """Restrict the calling thread and all its future children (no_new_privs first, as
        the kernel requires of an unprivileged caller); irreversible."""
        if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise LandlockError(code, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(code)}")
        _syscall(2, self.fd, 0)

    def close(self) -> None:
        os.close(self.fd)


def merged(rules: Iterable[PathRule]) -> tuple[PathRule, ...]:
    """Path rules with one rule per path (rights joined), in path order."""
    joined: dict[str, Fs] = {}
    for rule in rules:
        joined[rule.path] = joined.get(rule.path, Fs(0)) | rule.access
    return tuple(PathRule(p, a) for p, a in sorted(joined.items()))
