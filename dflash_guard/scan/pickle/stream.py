"""Walking one pickle stream the way the unpickler reads it, without ever unpickling it.

`pickletools.genops` is stricter than `pickle` in a few argument readers, and every place where
it refuses what the unpickler accepts hides the rest of the stream: a STRING with non-ASCII bytes
(torch unpickles with `encoding="utf-8"`), an INT or LONG written `0x10` (the unpickler parses
`int(text, 0)`), a GLOBAL whose name is not ASCII. Those readers are replaced here by ones at
least as lenient as the unpickler's; every other opcode uses `pickletools`' own table. The walk
keeps a symbolic stack (strings, ints, tuples, dicts, marks, imported globals and the objects
built from them) so STACK_GLOBAL names are followed through the stack and the memo, and so the
raw array bytes joblib writes after a `NumpyArrayWrapper` (outside any opcode) are skipped by
the size its state gives, as joblib's unpickler reads them.
"""

from __future__ import annotations

import codecs
import dataclasses
import math
import pickletools
import re
import time
from collections.abc import Iterator
from typing import IO

MAX_SECONDS = 120.0  # per stream; a hostile file must not hold the scan for ever
MAX_NESTED = 4  # joblib object arrays: pickle streams inside pickle streams
_JOBLIB_WRAPPERS = frozenset({"joblib.numpy_pickle.NumpyArrayWrapper",
                              "sklearn.externals.joblib.numpy_pickle.NumpyArrayWrapper"})
_DTYPE = re.compile(r"[<>|=]?[biufcmMUSV]\d{0,6}")
_CHECK_EVERY = 1 << 16  # opcodes between two looks at the clock
# Opcodes with which the unpickler calls an object the stream chose (a class, a reduce function,
# __setstate__): once one has run, a stream that faults later has already executed code.
# PERSID/BINPERSID call the loader's own persistent_load, not something the stream names.
_CALL_OPCODES = frozenset({"REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX"})


@dataclasses.dataclass(frozen=True)
class PickleGlobal:
    """A callable or class a pickle stream imports when loaded."""

    module: str | None  # None: a STACK_GLOBAL whose strings could not be followed
    name: str | None
    opcode: str
    position: int | None


@dataclasses.dataclass
class StreamResult:
    """What one pickle stream (up to and including its STOP) contains."""

    globals: list[PickleGlobal]
    opcodes: int = 0
    error: str | None = None
    timed_out: bool = False
    ints: list[int] = dataclasses.field(default_factory=list)
    builds_on_globals: list[str] = dataclasses.field(default_factory=list)
    calls: int = 0  # opcodes that call something (REDUCE, BUILD, INST...) the unpickler ran

    @property
    def complete(self) -> bool:
        """Whether the stream parsed to its STOP."""
        return self.error is None


class _Malformed(ValueError):
    """The stream is not a pickle the unpickler would accept."""


class _TimeUp(Exception):
    """The walk ran past `MAX_SECONDS`."""


def _line(stream: IO[bytes]) -> bytes:
    data = stream.readline()
    if not data.endswith(b"\n"):
        raise _Malformed("no newline found when reading a text argument")
    return data[:-1]


def _text(data: bytes) -> str:
    """The unpickler decodes with the caller's encoding: utf-8 for torch, else bytes-like."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _read_stringnl(stream: IO[bytes]) -> str:
    data = _line(stream)
    if len(data) < 2 or data[:1] not in (b'"', b"'") or data[-1:] != data[:1]:
        raise _Malformed("STRING argument without matching quotes")
    return _text(codecs.escape_decode(data[1:-1])[0])


def _read_int(stream: IO[bytes]) -> int | bool:
    data = _line(stream).rstrip(b"L")
    if data in (b"00", b"01"):
        return data == b"01"
    for base in (0, 10):  # INT/LONG use int(x, 0); GET/PUT int(x): accept both
        try:
            return int(data, base)
        except ValueError:
            continue
    raise _Malformed(f"not an integer: {data[:40]!r}")


_LENIENT_READERS = {
    "stringnl": _read_stringnl,
    "stringnl_noescape": lambda stream: _text(_line(stream)),
    "stringnl_noescape_pair": lambda stream: (_text(_line(stream)), _text(_line(stream))),
    "decimalnl_short": _read_int,
    "decimalnl_long": _read_int,
}


_CODE2OP = {op.code: op for op in pickletools.opcodes}  # = pickletools.code2op (not in typeshed)


def genops(stream: IO[bytes]) -> Iterator[tuple[pickletools.OpcodeInfo, object, int]]:
    """(opcode, argument, position) up to and including STOP; `ValueError` (or `_Malformed`)
    on an unknown opcode or an argument the unpickler would refuse too."""
    while True:
        position = stream.tell()
        code = stream.read(1)
        op = _CODE2OP.get(code.decode("latin-1"))
        if op is None:
            raise _Malformed(
                "pickle exhausted before STOP" if not code else f"unknown opcode {code!r}"
            )
        reader = _LENIENT_READERS.get(op.arg.name) if op.arg else None
        arg = None if op.arg is None else (reader or op.arg.reader)(stream)
        yield op, arg, position
        if op.name == "STOP":
            return


@dataclasses.dataclass(frozen=True)
class _Built:
    """An object the stream builds by calling an imported global (NEWOBJ, REDUCE...)."""

    source: PickleGlobal
    args: object
    state: object = None


def read_stream(stream: IO[bytes], _depth: int = 0) -> StreamResult:
    """Walk one pickle stream from the current position, collecting every imported global.

    Never raises: a malformed or truncated stream ends with `error` set, keeping what came before
    (the unpickler would already have run those opcodes); a walk past `MAX_SECONDS` also sets
    `timed_out`.
    """
    result = StreamResult(globals=[])
    stack: list[object] = []
    memo: dict[int, object] = {}
    deadline = time.monotonic() + MAX_SECONDS
    try:
        for op, arg, pos in genops(stream):
            result.opcodes += 1
            if result.opcodes % _CHECK_EVERY == 0 and time.monotonic() > deadline:
                raise _TimeUp(f"stopped after {MAX_SECONDS:g} s ({result.opcodes} opcodes)")
            _step(op, arg, pos, stack, memo, result)
            if op.name in _CALL_OPCODES:  # `_step` raised first when the call cannot happen
                result.calls += 1
            if op.name == "BUILD" and stack and isinstance(stack[-1], _Built) and (
                _qualified(stack[-1].source) in _JOBLIB_WRAPPERS
            ):
                _skip_joblib_array(stream, stack[-1], result, _depth)
            if op.name == "STOP":
                return result
    except _TimeUp as error:
        result.timed_out = True
        result.error = str(error)
    except Exception as error:  # noqa: BLE001 - every malformed input becomes a finding
        result.error = f"{type(error).__name__}: {error}"
    return result


def _qualified(source: PickleGlobal) -> str:
    return f"{source.module}.{source.name}"


def _skip_joblib_array(stream: IO[bytes], wrapper: _Built, result: StreamResult,
                       depth: int) -> None:
    """Past the array joblib wrote right after the wrapper's BUILD: an object array is a nested
    pickle (walked, its globals kept); any other is an optional padding (one length byte, then
    that many bytes) and exactly shape x itemsize raw bytes, which must be in the file."""
    state = wrapper.state if isinstance(wrapper.state, dict) else {}
    dtype, shape = state.get("dtype"), state.get("shape")
    descr = dtype.args[0] if isinstance(dtype, _Built) and isinstance(dtype.args, tuple) and (
        dtype.args and isinstance(dtype.args[0], str)) else None
    if descr is not None and descr.lstrip("<>|=").startswith("O"):
        if depth >= MAX_NESTED:
            raise _Malformed("joblib object arrays nested too deeply")
        inner = read_stream(stream, depth + 1)
        result.globals.extend(inner.globals)
        if inner.error:
            raise _Malformed(f"joblib object array: {inner.error}")
        return
    if descr is None or not _DTYPE.fullmatch(descr) or not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise _Malformed("a joblib array whose dtype or shape cannot be read: where its bytes "
                         "end is unknown")
    import numpy as np  # only to size the dtype joblib names

    size = math.prod(shape) * np.dtype(descr).itemsize
    if state.get("numpy_array_alignment_bytes") is not None:
        padding = stream.read(1)
        if not padding or padding[0] > 64:
            raise _Malformed("joblib array padding missing or over 64 bytes")
        stream.seek(padding[0], 1)
    here = stream.tell()
    end = stream.seek(0, 2)
    if here + size > end:
        raise _Malformed(f"joblib array of {size} bytes at {here} runs past the end ({end})")
    stream.seek(here + size)


_STRING_OPCODES = frozenset(
    [
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
    ]
)
_GET_OPCODES = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPCODES = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MARK = object()
_OTHER = object()


def _step(op: pickletools.OpcodeInfo, arg: object, pos: int, stack: list[object],
          memo: dict[int, object], result: StreamResult) -> None:
    """Apply one opcode's effect on a symbolic stack that keeps strings and marks."""
    name = op.name
    if name in _PUT_OPCODES or name == "MEMOIZE":
        if not stack:
            raise _Malformed(f"{name} on an empty stack")
        key = arg if name != "MEMOIZE" else len(memo)
        if not isinstance(key, int):
            raise _Malformed(f"{name} with a memo key that is not an integer")
        memo[key] = stack[-1]
        return
    imported: PickleGlobal | None = None
    if name in ("GLOBAL", "INST"):
        if not (isinstance(arg, tuple) and len(arg) == 2):
            raise _Malformed(f"{name} without a module and a name")
        module, attr = arg
        imported = PickleGlobal(module, attr, name, pos)
    elif name == "STACK_GLOBAL":
        module, attr = (stack[-2], stack[-1]) if len(stack) >= 2 else (None, None)
        if isinstance(module, str) and isinstance(attr, str):
            imported = PickleGlobal(module, attr, name, pos)
        else:
            imported = PickleGlobal(None, None, name, pos)
    elif name.startswith("EXT"):
        imported = PickleGlobal(None, f"extension code {arg}", name, pos)
    elif isinstance(arg, int) and not isinstance(arg, bool):
        result.ints.append(arg)

    if imported is not None:
        result.globals.append(imported)
    if name == "BUILD" and len(stack) >= 2 and isinstance(stack[-2], PickleGlobal):
        target = stack[-2]
        result.builds_on_globals.append(f"{target.module}.{target.name}")

    before = op.stack_before
    marked: list[object] = []
    if pickletools.markobject in before or (name == "POP" and stack and stack[-1] is _MARK):
        if _MARK not in stack:
            raise _Malformed(f"{name} without a MARK")
        at = len(stack) - 1 - stack[::-1].index(_MARK)
        marked = stack[at + 1 :]
        del stack[at:]
        to_pop = before.index(pickletools.markobject) if pickletools.markobject in before else 0
    else:
        to_pop = len(before)
    if len(stack) < to_pop:
        raise _Malformed(f"{name} pops {to_pop} items from a stack of {len(stack)}")
    popped = stack[len(stack) - to_pop :]
    del stack[len(stack) - to_pop :]

    after = op.stack_after
    value = _value(name, arg, popped, marked)
    if value is not _OTHER:
        stack.append(value)
    elif name in _STRING_OPCODES:
        stack.append(arg if isinstance(arg, str) else _OTHER)
    elif name in _GET_OPCODES:
        if arg not in memo:
            raise _Malformed(f"{name} of memo key {arg} never stored")
        stack.append(memo[arg])
    elif name in ("GLOBAL", "STACK_GLOBAL"):
        stack.append(imported)
    elif name == "DUP" and popped:
        stack.extend([popped[-1], popped[-1]])
    elif pickletools.markobject in after:
        stack.append(_MARK)
    else:
        stack.extend([_OTHER] * len(after))


_SMALL = 64  # items of a tuple or dict kept as values (a joblib state has 6); more: opaque
_INT_OPCODES = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"})


def _value(name: str, arg: object, popped: list[object], marked: list[object]) -> object:
    """The value an opcode pushes when it is one the walk follows (small ints, None, bools,
    tuples, dicts, objects built from a global), else `_OTHER` for the generic push."""
    if name in _INT_OPCODES and isinstance(arg, int):
        return arg
    if name in ("NONE", "NEWTRUE", "NEWFALSE"):
        return {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name]
    if name in ("EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "TUPLE"):
        items = marked if name == "TUPLE" else popped
        return tuple(items) if len(items) <= _SMALL else _OTHER
    if name in ("EMPTY_DICT", "DICT"):
        pairs = list(zip(marked[::2], marked[1::2], strict=False))[:_SMALL]
        return {k: v for k, v in pairs if isinstance(k, (str, int))}
    if name in ("SETITEM", "SETITEMS") and popped and isinstance(popped[0], dict):
        target = popped[0]  # the dict stays on the stack, with the new items
        items = popped[1:] if name == "SETITEM" else marked
        for key, item in zip(items[::2], items[1::2], strict=False):
            if isinstance(key, (str, int)) and len(target) < _SMALL:
                target[key] = item
        return target
    if name in ("NEWOBJ", "REDUCE", "NEWOBJ_EX") and popped and isinstance(
        popped[0], PickleGlobal
    ):
        return _Built(popped[0], popped[1] if len(popped) > 1 else None)
    if name == "BUILD" and popped and isinstance(popped[0], _Built):
        return dataclasses.replace(popped[0], state=popped[1] if len(popped) > 1 else None)
    return _OTHER
