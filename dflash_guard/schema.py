"""One strict reader for the YAML (and JSON) documents the tool trusts: lockfiles and policies.

`read_document` parses with PyYAML's safe loader and keeps the node tree, so every value knows
the line it came from. A `Field` is one value and its dotted name (`artifacts[0].files[2].sha256`);
its accessors refuse unknown, duplicate and missing keys and wrong types, and every error is one
`InputError` line of the same shape: `FILE:LINE: FIELD: MESSAGE` (`expected str, got 3`,
`unknown field (allowed: a, b)`, `field given twice`, `missing required field 'x'`). Only safe
constructors run: a `!!python/...` tag is an error, never code. Hostile documents end in one
line too: anchors and aliases (a 400-byte alias bomb expands to gigabytes) are refused before any
value is built, so are documents over `MAX_DOCUMENT_CHARS` and nesting too deep to compose, and a
value quoted in a message is shortened (`errors.shorten`).

`merged` lays one document over another (a policy over the one it `extends`) as node trees, so
every value keeps the file and line it came from, and a path is read relative to its own file.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

import yaml

from dflash_guard.errors import InputError, shorten

Check = Callable[[Any], Any]
T = TypeVar("T")
U = TypeVar("U")
# libyaml's parser when PyYAML was built with it (10x faster on a 100k-file lockfile); the same
# safe constructors and resolver either way, and nodes keep their line marks.
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
STR_TAG = "tag:yaml.org,2002:str"

# A lockfile of 100,000 files is about 13 MB; anything far past that is not a document we wrote.
MAX_DOCUMENT_CHARS = 256 * 1024 * 1024


class Document:
    """A parsed document: its source name, the folder its relative paths are read from, and
    the loader that builds values from its nodes. A merged document (`merged`) also knows which
    document each node it took from another came from (`owner`)."""

    def __init__(self, text: str, source: str, folder: Path = Path(".")) -> None:
        self.source = source
        self.folder = folder
        self._owners: dict[int, Document] = {}
        if len(text) > MAX_DOCUMENT_CHARS:
            raise InputError(f"{source}: larger than {MAX_DOCUMENT_CHARS:,} characters")
        self._loader = SafeLoader(text)

    def root(self) -> Field | None:
        """The top-level value, or None for an empty document; bad YAML is an `InputError`."""
        try:
            node = self._loader.get_single_node()
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            line = f":{mark.line + 1}" if mark else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            if "nesting depth" in problem:  # libyaml's limit: the pure-Python parser's wording
                problem = "nested too deeply"
            raise InputError(f"{self.source}{line}: not valid YAML: {problem}") from None
        except RecursionError:
            raise InputError(f"{self.source}: not valid YAML: nested too deeply") from None
        finally:
            self._loader.dispose()
        if node is None:
            return None
        _refuse_aliases(node, self.source)
        return Field(self, node, "")

    def owner(self, node: yaml.Node) -> Document:
        """The document `node` came from: this one, or one a merge took it from."""
        return self._owners.get(id(node), self)

    def construct(self, node: yaml.Node, where: str) -> Any:
        """The Python value of a node (safe constructors only: no tag runs code)."""
        if node.tag == STR_TAG and isinstance(node, yaml.ScalarNode):
            return node.value  # what the str constructor returns, without its bookkeeping
        try:
            return self._loader.construct_object(node, deep=True)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            mark = getattr(error, "problem_mark", None) or node.start_mark
            raise InputError(
                f"{self.source}:{mark.line + 1}: {where or 'top level'}: {problem}"
            ) from None
        except RecursionError:  # composing may not recurse (libyaml), building values does
            raise InputError(f"{self.source}:{node.start_mark.line + 1}: {where or 'top level'}: "
                             "nested too deeply") from None
        except (ValueError, OverflowError) as error:  # a 5000-digit int, a 30th of February
            problem = str(error).split(":")[0]
            raise InputError(
                f"{self.source}:{node.start_mark.line + 1}: {where or 'top level'}: "
                f"not a usable value ({problem})"
            ) from None


def _refuse_aliases(root: yaml.Node, source: str) -> None:
    """Refuse a node tree in which some node is reached twice: an alias (`*name`) of an anchor."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise InputError(f"{source}:{node.start_mark.line + 1}: anchors and aliases "
                             "(&name, *name) are not allowed")
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend(part for pair in node.value for part in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def read_document(text: str, source: str, folder: Path = Path(".")) -> Field | None:
    """Parse `text` (YAML or JSON) named `source`, its relative paths read from `folder`;
    None when it holds nothing."""
    return Document(text, source, folder).root()


def merged(base: Field, over: Field) -> Field:
    """`over` laid on `base`: mappings merge key by key, anything else (lists too) is replaced.
    Both keep their nodes: a value names the file and line it came from, and its paths are read
    from that file's folder (`Field.path`)."""
    if not (isinstance(base.node, yaml.MappingNode) and isinstance(over.node, yaml.MappingNode)):
        return over
    document = over.document
    theirs = {_key(key): value for key, value in base.node.value}
    ours = {_key(key) for key, _ in over.node.value}
    pairs: list[tuple[yaml.Node, yaml.Node]] = []
    for key, value in base.node.value:
        if _key(key) not in ours:
            for node in (key, value):
                document._owners[id(node)] = base.document.owner(node)
            pairs.append((key, value))
    for key, value in over.node.value:
        if (inherited := theirs.get(_key(key))) is not None:
            value = merged(Field(base.document.owner(inherited), inherited, ""),
                           Field(document, value, "")).node
        pairs.append((key, value))
    node = yaml.MappingNode(over.node.tag, pairs, over.node.start_mark, over.node.end_mark)
    return Field(document, node, over.where)


def _key(node: yaml.Node) -> str | None:
    """A mapping key's text (None for a key that is not a scalar: the reader refuses it)."""
    return node.value if isinstance(node, yaml.ScalarNode) else None


class Field:
    """One value of a document with the node it came from, so errors can name its line."""

    def __init__(self, document: Document, node: yaml.Node, where: str) -> None:
        self.document = document
        self.node = node
        self.where = where

    @property
    def line(self) -> int:
        return int(self.node.start_mark.line) + 1

    def path(self) -> Path:
        """The path this field names, relative to the folder of the file that holds it."""
        return self.document.folder / self.text()

    def fail(self, message: str) -> InputError:
        """The error for this field: `FILE:LINE: FIELD: MESSAGE`."""
        return InputError(
            f"{self.document.source}:{self.line}: {self.where or 'top level'}: {message}"
        )

    def value(self) -> Any:
        return self.document.construct(self.node, self.where)

    @property
    def is_null(self) -> bool:
        return isinstance(self.node, yaml.ScalarNode) and self.node.tag == "tag:yaml.org,2002:null"

    def mapping(self, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> Fields:
        """The keys of a mapping; unknown, duplicate and missing keys are errors."""
        if not isinstance(self.node, yaml.MappingNode):
            raise self.fail(f"expected a mapping, got {_kind(self.node)}")
        fields: dict[str, Field] = {}
        for key_node, value_node in self.node.value:
            key = self.document.construct(key_node, self.where)
            name = key if isinstance(key, str) and len(key) <= 80 else shorten(key)
            here = f"{self.where}.{name}" if self.where else name
            key_field = Field(self.document.owner(key_node), key_node, here)
            if not isinstance(key, str) or key not in allowed:
                raise key_field.fail(f"unknown field (allowed: {', '.join(allowed)})")
            if key in fields:
                raise key_field.fail("field given twice")
            fields[key] = Field(self.document.owner(value_node), value_node, here)
        for key in required:
            if key not in fields:
                raise self.fail(f"missing required field {key!r}")
        return Fields(self, fields)

    def items(self) -> list[Field]:
        """The entries of a list, each named `FIELD[i]`."""
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.fail(f"expected a list, got {_kind(self.node)}")
        return [Field(self.document.owner(node), node, f"{self.where}[{i}]")
                for i, node in enumerate(self.node.value)]

    @overload
    def typed(self, kind: type[T], check: Check | None = None, expect: str = "") -> T: ...

    @overload
    def typed(self, kind: tuple[type[T], type[U]], check: Check | None = None,
              expect: str = "") -> T | U: ...

    @overload
    def typed(self, kind: type | tuple[type, ...], check: Check | None = None,
              expect: str = "") -> object: ...

    def typed(self, kind: type | tuple[type, ...], check: Check | None = None,
              expect: str = "") -> object:
        """The value when it is a `kind` (a bool is never an int) and passes `check`."""
        value = self.value()
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok_type = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok_type or (check is not None and not check(value)):
            wanted = expect or " or ".join(k.__name__ for k in kinds)
            raise self.fail(f"expected {wanted}, got {shorten(value)}")
        return value

    def text(self, check: Check | None = None, expect: str = "") -> str:
        """A non-empty string passing `check`."""
        return self.typed(str, lambda v: v.strip() and (check is None or check(v)),
                          expect or "a non-empty string")

    def flag(self) -> bool:
        return self.typed(bool, expect="true or false")

    def date(self) -> dt.date:
        return self.typed(dt.date, lambda v: not isinstance(v, dt.datetime), "a date YYYY-MM-DD")

    def choice(self, choices: tuple[str, ...]) -> str:
        return self.typed(str, lambda v: v in choices, f"one of {', '.join(choices)}")


class Fields(dict[str, Field]):
    """The fields of a mapping (a dict of `Field`), with access to absent and null ones."""

    def __init__(self, owner: Field, fields: dict[str, Field]) -> None:
        super().__init__(fields)
        self.owner = owner

    def optional(self, key: str) -> Field | None:
        """The field, or None when it is absent or null."""
        field = self.get(key)
        return None if field is None or field.is_null else field

    def required(self, key: str) -> Field:
        """The field; absent or null is `missing required field`."""
        field = self.optional(key)
        if field is None:
            raise self.owner.fail(f"missing required field {key!r}")
        return field

    def entries(self, key: str) -> list[Field]:
        """The entries of a list field; an absent or null list is empty."""
        field = self.optional(key)
        return [] if field is None else field.items()


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return shorten(node.value) if node.value != "" else "nothing"
