"""A render budget for untrusted chat templates: every render in the tool runs through here.

The environment is transformers' (`ImmutableSandboxedEnvironment`, `trim_blocks`,
`lstrip_blocks`, `loopcontrols`, the `{% generation %}` tag, `tojson`, `raise_exception`,
`strftime_now`), with a budget on top: every loop item and every call is a step; output bytes
and the length of any string or list a template builds are capped before the value is built
(`*`, `+`, `%`, `**`, `~`, `str.format`, `join`, `replace`, `center`/`ljust`/`rjust`/`zfill`,
the `center`/`indent`/`format`/`join`/`replace`/`slice`/`tojson` filters, `lipsum`, and every
captured block: `{% set %}`, a macro's body); a deadline on wall time is checked at each step.
jinja2 folds constant expressions at compile time; the intercepted operators are never folded
(the sandbox's rule), so `"x" * 100000 * 100000` is charged at render time too. Past the
budget, and on any exception from compiling or rendering (MemoryError, OverflowError,
RecursionError included), `TemplateRenderError` names the template.
"""

from __future__ import annotations

import json
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, NoReturn

from jinja2 import Template, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import generate_lorem_ipsum


@dataclass(frozen=True)
class Budget:
    """What one render may spend."""

    steps: int = 1_000_000  # loop items + calls
    output_bytes: int = 16 * 1024 * 1024  # the rendered text, UTF-8
    value_chars: int = 16 * 1024 * 1024  # any one string or list a template builds
    seconds: float = 10.0  # wall time


DEFAULT_BUDGET = Budget()


class BudgetExceeded(TemplateError):
    """A render went past its budget (a `TemplateError` so jinja2 never swallows it)."""


class TemplateRenderError(Exception):
    """A template that cannot be compiled or rendered within the budget: one readable line."""

    def __init__(self, message: str, *, over_budget: bool) -> None:
        super().__init__(message)
        self.over_budget = over_budget


class GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}`: transformers' assistant-mask tag; rendering
    keeps the body unchanged."""

    tags = {"generation"}  # noqa: RUF012 - jinja2's Extension API

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


_LOOP_FILTER = "dflash_guard_budget_loop"


class _BudgetCodeGenerator(CodeGenerator):
    """Compiles every `~` through the budget's length check."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.budget_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


# `{:>{w}.{p}f}`: the width and precision digits of a format spec.
_SPEC_NUMBERS = re.compile(r"(\d+)")
# `%-*.*d`: one printf-style conversion (`%%` included, it costs nothing).
_PERCENT = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")


def _size(value: object) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else len(str(value))


class BudgetedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' template environment with a per-render `Budget`."""

    code_generator_class = _BudgetCodeGenerator
    intercepted_binops = frozenset({"*", "+", "%", "**"})

    def __init__(self, budget: Budget = DEFAULT_BUDGET) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True,
                         extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
        self.budget = budget
        self.steps = 0
        self.deadline = time.monotonic() + budget.seconds
        self.concat = self._concat  # type: ignore[method-assign]  # compiled blocks join with it
        self.filters[_LOOP_FILTER] = self._count_loop
        self.filters["slice"] = self._sized_slice(self.filters["slice"])
        self.globals["lipsum"] = self._lipsum(generate_lorem_ipsum)
        self.filters["tojson"] = self._tojson
        for name in ("center", "indent", "format", "join", "replace", "wordwrap", "truncate"):
            self.filters[name] = self._sized(name, self.filters[name])
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        """The template's tree with every `{% for %}` iterable passed through the counting
        filter (before code generation, which binds the filters a tree names)."""
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, _LOOP_FILTER, [], [], None, None,
                                     lineno=loop.lineno)
        return tree

    def start(self) -> None:
        """A fresh budget for the next render."""
        self.steps = 0
        self.deadline = time.monotonic() + self.budget.seconds

    def step(self, count: int = 1) -> None:
        """Charge `count` steps; past the budget or the deadline, `BudgetExceeded`."""
        self.steps += count
        if self.steps > self.budget.steps:
            raise BudgetExceeded(f"more than {self.budget.steps:,} steps (loop items and calls)")
        if time.monotonic() > self.deadline:
            raise BudgetExceeded(f"more than {self.budget.seconds:g} s of rendering")

    def check_size(self, chars: int, what: str) -> None:
        """Refuse to build a value of `chars` characters or items past the budget."""
        if chars > self.budget.value_chars:
            raise BudgetExceeded(f"{what} would build {chars:,} characters or items (the "
                                 f"budget is {self.budget.value_chars:,})")

    def _concat(self, pieces: Iterable[str]) -> str:
        """The join of a captured block, macro or filter block (`{% set x %}...`), sized first:
        its pieces may be one string repeated by a loop."""
        items = list(pieces)
        self.check_size(sum(len(piece) for piece in items), "a captured block")
        return "".join(items)

    def _sized_slice(self, real: Callable[..., Any]) -> Callable[..., Any]:
        """The slice filter, its slice count sized first (it builds that many lists)."""
        passes_context = getattr(real, "jinja_pass_arg", None) is not None

        def sliced(*given: Any, **kwargs: Any) -> Any:
            args = given[1:] if passes_context else given
            slices = kwargs.get("slices", args[1] if len(args) > 1 else 0)
            if isinstance(slices, int):
                self.check_size(slices, "the slice filter")
            return real(*given, **kwargs)

        sliced.jinja_pass_arg = getattr(real, "jinja_pass_arg", None)  # type: ignore[attr-defined]
        return sliced

    def _lipsum(self, real: Callable[..., str]) -> Callable[..., str]:
        def lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
            self.check_size(n * max * 12, "lipsum")
            return real(n, html, min, max)

        return lipsum

    def _count_loop(self, iterable: Iterable[Any]) -> Iterator[Any]:
        for item in iterable:
            self.step()
            yield item

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        __self.step()
        name = getattr(__obj, "__name__", "")
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            __self._check_str_method(owner, name, args)
        return super().call(__context, __obj, *args, **kwargs)

    def _check_str_method(self, owner: str, name: str, args: tuple[Any, ...]) -> None:
        if name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
            self.check_size(args[0], f"str.{name}")
        elif name == "join" and args and isinstance(args[0], (list, tuple)):
            self.check_size(_joined_size(owner, args[0]), "str.join")
        elif name == "replace" and len(args) >= 2:
            self.check_size(_replaced_size(owner, args[0], args[1]), "str.replace")
        elif name == "expandtabs":
            width = args[0] if args and isinstance(args[0], int) else 8
            self.check_size(len(owner) * max(width, 1), "str.expandtabs")

    def call_binop(self, context: Context, operator_: str, left: Any, right: Any) -> Any:
        self.step()
        if operator_ == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                    self.check_size(len(seq) * max(times, 0), "'*'")
        elif operator_ == "+" and isinstance(left, (str, list, tuple)) and isinstance(
                right, (str, list, tuple)):
            self.check_size(len(left) + len(right), "'+'")
        elif operator_ == "%" and isinstance(left, str):
            self.check_size(_percent_size(left, right), "'%' formatting")
        elif (operator_ == "**" and isinstance(left, int) and isinstance(right, int)
              and abs(left) > 1 and right > 0 and right * abs(left).bit_length() > 4096):
            raise BudgetExceeded(f"{left} ** {right} is a number past 4096 bits")
        return super().call_binop(context, operator_, left, right)

    def budget_concat(self, values: tuple[Any, ...]) -> str:
        """`a ~ b`: jinja2's own join, after the length check."""
        self.step()
        self.check_size(sum(_size(v) for v in values), "'~'")
        return "".join(str(v) for v in values)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt: str = value.__self__
        inner = wrapped

        def checked(*args: Any, **kwargs: Any) -> str:
            values = [*args, *kwargs.values()]
            if value.__name__ == "format_map" and args and isinstance(args[0], dict):
                values = list(args[0].values())
            self.check_size(_format_size(fmt, values), "str.format")
            return inner(*args, **kwargs)

        return checked

    def _sized(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        """A filter whose output is sized first: widths and joined lengths past the budget."""

        passes_context = getattr(real, "jinja_pass_arg", None) is not None

        def filtered(*given: Any, **kwargs: Any) -> Any:
            self.step()
            args = given[1:] if passes_context else given
            value = args[0] if args else ""
            numbers = [a for a in [*args[1:], *kwargs.values()] if isinstance(a, int)]
            lines = str(value).count("\n") + 1 if name == "indent" else 1
            widest = max(numbers, default=0)
            estimate = _size(value) + widest * lines
            if name == "format":
                estimate = _percent_size(str(value), tuple(args[1:]) or kwargs)
            elif name == "join" and isinstance(value, (list, tuple)):
                separator = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
                estimate = _joined_size(separator, value)
            elif name == "replace" and len(args) >= 3:
                estimate = _replaced_size(str(value), args[1], args[2])
            self.check_size(estimate, f"the {name} filter")
            return real(*given, **kwargs)

        filtered.jinja_pass_arg = getattr(real, "jinja_pass_arg", None)  # type: ignore[attr-defined]
        return filtered

    def _tojson(self, value: Any, ensure_ascii: bool = False, indent: int | None = None,
                separators: Any = None, sort_keys: bool = False) -> str:
        if isinstance(indent, int):
            self.check_size(indent, "tojson's indent")
        text = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)
        self.check_size(len(text), "tojson")
        return text


def _joined_size(separator: str, items: list[Any] | tuple[Any, ...]) -> int:
    return sum(_size(item) for item in items) + len(separator) * max(len(items) - 1, 0)


def _replaced_size(text: str, old: object, new: object) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(text)
    count = len(text) + 1 if old == "" else text.count(old)
    return len(text) + count * max(len(new) - len(old), 0)


def _format_size(fmt: str, values: list[Any]) -> int:
    """An upper bound on `fmt.format(*values)`: every field as long as the longest value plus
    the widest width or precision named anywhere (literally or, nested, by an argument)."""
    fields = 0
    widths = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    for _, field, spec, _ in string.Formatter().parse(fmt):
        if field is None:
            continue
        fields += 1
        widths += [int(n) for n in _SPEC_NUMBERS.findall(spec or "")]
    longest = max((_size(v) for v in values), default=0)
    return len(fmt) + fields * (longest + max(widths, default=0))


def _percent_size(fmt: str, args: Any) -> int:
    """An upper bound on `fmt % args`, as `_format_size` for printf-style conversions."""
    values = list(args.values()) if isinstance(args, dict) else (
        list(args) if isinstance(args, tuple) else [args])
    widths = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    conversions = 0
    for match in _PERCENT.finditer(fmt):
        conversions += 1
        widths += [int(n) for n in match.groups() if n and n != "*"]
    longest = max((_size(v) for v in values), default=0)
    return len(fmt) + conversions * (longest + max(widths, default=0))


def _raise_exception(message: str) -> NoReturn:
    raise TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@lru_cache(maxsize=128)
def _compiled(source: str, budget: Budget) -> tuple[BudgetedEnvironment, Template]:
    """A template compiled once (as transformers caches it); its environment's budget is
    restarted for every render."""
    env = BudgetedEnvironment(budget)
    return env, env.from_string(source)


def render_template(source: str, where: str, variables: dict[str, Any],
                    budget: Budget = DEFAULT_BUDGET) -> str:
    """`source` rendered with `variables` under `budget`; `TemplateRenderError` (one line naming
    `where`) when it cannot compile, fails, or goes past the budget."""
    try:
        env, template = _compiled(source, budget)
        env.start()
        out: list[str] = []
        size = 0
        for chunk in template.root_render_func(template.new_context(dict(variables))):
            size += len(chunk.encode("utf-8", "surrogatepass"))
            if size > budget.output_bytes:
                raise BudgetExceeded(f"more than {budget.output_bytes:,} bytes of output")
            env.step()
            out.append(chunk)
        return "".join(out)
    except BudgetExceeded as error:
        raise TemplateRenderError(f"{where}: the chat template goes past its render budget: "
                                  f"{error}", over_budget=True) from None
    except (MemoryError, OverflowError, RecursionError) as error:
        raise TemplateRenderError(f"{where}: the chat template goes past its render budget "
                                  f"({type(error).__name__})", over_budget=True) from None
    except Exception as error:  # noqa: BLE001 - any failure of an untrusted program is input
        raise TemplateRenderError(f"{where}: the chat template cannot render these messages: "
                                  f"{type(error).__name__}: {error}", over_budget=False) from None

