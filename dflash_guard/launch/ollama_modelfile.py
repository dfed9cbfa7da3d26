"""ollama's Modelfile grammar, ported from its own parser: a lint reads a Modelfile as ollama.

A faithful port of `ParseFile`, `parseRuneForState`, `unquote`, `quote` and `Command.String` in
ollama's `parser/parser.go` (github.com/ollama/ollama at commit
fb30760996871fa9460115c753afd2c60d4ab0f7, tag v0.33.0-rc2; MIT licence, tests/vectors/ollama/):
a rune-by-rune state machine over the commands FROM (read as the command `model`), ADAPTER, DRAFT,
LICENSE, TEMPLATE, SYSTEM, RENDERER, PARSER, REQUIRES, MESSAGE ROLE VALUE (`role: value`) and
PARAMETER NAME VALUE (the command named NAME); command words in any case, `#` comments at the
start of a line, values trimmed unless quoted in `"..."` or `\"\"\"...\"\"\"` (which may span
lines), runes Go's `strconv.IsPrint` rejects dropped, a BOM choosing UTF-8 or UTF-16. A file
without FROM, an unknown command or message role, or an unterminated quote is a
`ModelfileError` with ollama's own words. tests/launch/test_ollama_modelfile.py runs ollama's
parser_test.go cases (tests/vectors/ollama/parser_cases.json) through it.
"""

from __future__ import annotations

import dataclasses
import enum
import unicodedata

from dflash_guard.errors import InputError

COMMANDS = ("from", "license", "template", "system", "adapter", "draft", "renderer", "parser",
            "parameter", "message", "requires")
ROLES = ("system", "user", "assistant")
ERR_MISSING_FROM = "no FROM line"
ERR_INVALID_ROLE = 'message role must be one of "system", "user", or "assistant"'
ERR_INVALID_COMMAND = ('command must be one of "from", "license", "template", "system", '
                       '"adapter", "draft", "renderer", "parser", "parameter", "message", or '
                       '"requires"')
ERR_UNEXPECTED_EOF = "unexpected EOF"
# the commands `Command.String` writes as `NAME value` (the rest are FROM, MESSAGE, PARAMETER)
PLAIN = ("license", "template", "system", "adapter", "renderer", "parser", "requires", "draft")


class ModelfileError(InputError):
    """ollama's parser would refuse the file: `(line N): why`, or an unexpected end."""

    def __init__(self, message: str, line: int = 0, kind: str = "") -> None:
        self.line = line
        self.kind = kind or message  # which of ollama's errors (ERR_*), for the vectors
        super().__init__(f"(line {line}): {message}" if line > 0 else message)


@dataclasses.dataclass(frozen=True)
class Command:
    """One command as ollama records it: `model` for FROM, a parameter's own name for
    PARAMETER, `message` with `role: text`."""

    name: str
    args: str

    def __str__(self) -> str:
        """The line ollama's `Command.String` writes for it."""
        if self.name == "model":
            return f"FROM {self.args}"
        if self.name in PLAIN:
            return f"{self.name.upper()} {quote(self.args)}"
        if self.name == "message":
            role, _, message = self.args.partition(": ")
            return f"MESSAGE {role} {quote(message)}"
        return f"PARAMETER {self.name} {quote(self.args)}"


class _State(enum.Enum):
    NIL = 0
    NAME = 1
    VALUE = 2
    PARAMETER = 3
    MESSAGE = 4
    COMMENT = 5


class _RuneError(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _is_alpha(r: str) -> bool:
    return "a" <= r <= "z" or "A" <= r <= "Z"


def _is_space(r: str) -> bool:
    return r in (" ", "\t")


def _is_newline(r: str) -> bool:
    return r in ("\r", "\n")


def is_print(r: str) -> bool:
    """Go's `strconv.IsPrint`: letters, marks, numbers, punctuation, symbols, and ASCII space."""
    return r == " " or unicodedata.category(r)[0] in "LMNPS"


def _next(r: str, state: _State) -> tuple[_State, str]:
    """`parseRuneForState`: the next state and the rune to keep ("" for Go's rune 0)."""
    if state is _State.NIL:
        if r == "#":
            return _State.COMMENT, ""
        if _is_space(r) or _is_newline(r):
            return _State.NIL, ""
        return _State.NAME, r
    if state is _State.NAME:
        if _is_alpha(r):
            return _State.NAME, r
        if _is_space(r):
            return _State.VALUE, ""
        raise _RuneError(ERR_INVALID_COMMAND)
    if state is _State.VALUE:
        if _is_newline(r) or _is_space(r):
            return _State.NIL, r
        return _State.VALUE, r
    if state in (_State.PARAMETER, _State.MESSAGE):
        if _is_alpha(r) or (state is _State.PARAMETER and (r.isascii() and r.isdigit()
                                                            or r == "_")):
            return state, r
        if _is_space(r):
            return _State.VALUE, ""
        raise _RuneError(ERR_UNEXPECTED_EOF)
    if _is_newline(r):  # a comment ends at the line's end
        return _State.NIL, ""
    return _State.COMMENT, ""


def unquote(s: str) -> tuple[str, bool]:
    """`unquote`: the value inside `\"\"\"...\"\"\"` or `"..."`, or `s` itself; False when a
    quote is not closed (single quotes are not quotes)."""
    if s[:3] == '"""':
        if len(s) >= 6 and s[-3:] == '"""':
            return s[3:-3], True
        return "", False
    if s[:1] == '"':
        if len(s) >= 2 and s[-1] == '"':
            return s[1:-1], True
        return "", False
    return s, True


def quote(s: str) -> str:
    """`quote`: a value with a newline or a space at either end in quotes (triple when it holds
    a double quote), any other value as it is."""
    if "\n" in s or s.startswith(" ") or s.endswith(" "):
        return f'"""{s}"""' if '"' in s else f'"{s}"'
    return s


def _trim(s: str) -> str:
    """Go's `strings.TrimSpace` (Unicode white space)."""
    return s.strip(" \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                   "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def decode(data: bytes) -> str:
    """The text ollama reads: a UTF-16 BOM (either order) decodes UTF-16, a UTF-8 BOM is dropped,
    anything else is UTF-8, an invalid sequence read as U+FFFD (`unicode.BOMOverride`)."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        codec = "utf-16-le" if data[:2] == b"\xff\xfe" else "utf-16-be"
        return data[2:].decode(codec, "replace")
    return data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")


def parse(text: str) -> list[Command]:
    """The commands of a Modelfile as ollama's `ParseFile` reads them, or `ModelfileError`."""
    commands: list[Command] = []
    state, line, buffer, role, name = _State.NIL, 1, "", "", ""
    for r in text:
        if _is_newline(r):
            line += 1
        try:
            following, kept = _next(r, state)
        except _RuneError as error:
            if error.kind == ERR_UNEXPECTED_EOF:
                raise ModelfileError(f"{ERR_UNEXPECTED_EOF}: {buffer}",
                                     kind=ERR_UNEXPECTED_EOF) from None
            raise ModelfileError(error.kind, line) from None
        if following is not state:
            if state is _State.NAME:
                word = buffer.lower()
                if word not in COMMANDS:
                    raise ModelfileError(ERR_INVALID_COMMAND, line)
                if word == "from":
                    name = "model"
                elif word == "parameter":
                    following = _State.PARAMETER
                elif word == "message":
                    following, name = _State.MESSAGE, word
                else:
                    name = word
            elif state is _State.PARAMETER:
                name = buffer
            elif state is _State.MESSAGE:
                if buffer not in ROLES:
                    raise ModelfileError(ERR_INVALID_ROLE, line)
                role = buffer
            elif state is _State.VALUE:
                value, ok = unquote(_trim(buffer))
                if not ok or _is_space(kept):
                    buffer += kept  # inside a quote, or a space within the value
                    continue
                if role:
                    value, role = f"{role}: {value}", ""
                commands.append(Command(name, value))
            buffer, state = "", following
        if kept and is_print(kept):
            buffer += kept
    if state is _State.VALUE:
        value, ok = unquote(_trim(buffer))
        if not ok:
            raise ModelfileError(ERR_UNEXPECTED_EOF)
        commands.append(Command(name, f"{role}: {value}" if role else value))
    elif state not in (_State.NIL, _State.COMMENT):
        raise ModelfileError(ERR_UNEXPECTED_EOF)
    if not any(c.name == "model" for c in commands):
        raise ModelfileError(ERR_MISSING_FROM)
    return commands


def render(commands: list[Command]) -> str:
    """`Modelfile.String`: each command's line, newline-terminated."""
    return "".join(f"{command}\n" for command in commands)
