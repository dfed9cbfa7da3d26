"""Benchmark the render budget on real chat templates: what counting costs.

Renders each chat template of the pinned llama.cpp tree on a four-turn conversation, best of
--repeat each, in rotated rounds: transformers' own `render_jinja_template` (the baseline), the
budgeted `render_template` (both compile a template once and cache it), and the scan's
`check_template` (the grammar's parse plus three trial renders).
Prints total seconds and the ratios budget/transformers and check/transformers, and how long
P8 (10^10 nested loop steps) takes to be refused. No goal yet: this measures the overhead.

    python benchmarks/bench_template_budget.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers.utils.chat_template_utils import render_jinja_template  # noqa: E402

from dflash_guard.templates.grammar import check_template  # noqa: E402
from dflash_guard.templates.sandbox import TemplateRenderError, render_template  # noqa: E402
from tests.support.llamacpp import source_tree  # noqa: E402

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Why?"}]
P8 = ("{% for m in messages %}{% for i in range(100000) %}{% for j in range(100000) %}"
      "{% endfor %}{% endfor %}{{ m['content'] }}{% endfor %}")


def _theirs(source: str) -> None:
    with contextlib.suppress(Exception):  # a template that refuses this conversation
        render_jinja_template([MESSAGES], chat_template=source, add_generation_prompt=True,
                              bos_token="<s>", eos_token="</s>")


def _ours(source: str) -> None:
    with contextlib.suppress(TemplateRenderError):
        render_template(source, "t", {"messages": MESSAGES, "add_generation_prompt": True,
                                      "tools": None, "documents": None, "bos_token": "<s>",
                                      "eos_token": "</s>"})


def _check(source: str) -> None:
    check_template(source, "t")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sources = [p.read_text(encoding="utf-8")
               for p in sorted((source_tree() / "models" / "templates").glob("*.jinja"))]
    runs: dict[str, Callable[[str], None]] = {"transformers": _theirs, "budget": _ours,
                                              "check": _check}
    best = dict.fromkeys(runs, float("inf"))
    for round_ in range(args.repeat):
        names = list(runs)
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            start = time.perf_counter()
            for source in sources:
                runs[name](source)
            best[name] = min(best[name], time.perf_counter() - start)
    print(f"{len(sources)} templates, best of {args.repeat}:")
    for name, seconds in best.items():
        print(f"  {name:13s} {seconds:7.3f} s")
    print(f"  budget/transformers {best['budget'] / best['transformers']:.2f}x, "
          f"check/transformers {best['check'] / best['transformers']:.2f}x")
    start = time.perf_counter()
    try:
        render_template(P8, "P8", {"messages": MESSAGES})
    except TemplateRenderError as error:
        print(f"  P8 refused in {time.perf_counter() - start:.2f} s: {error}")


if __name__ == "__main__":
    main()
