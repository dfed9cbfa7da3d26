"""`dflash-guard launch ENGINE`: print (or exec) the serve command loading exactly what a lock
pins; `launch --check ENGINE -- COMMAND...` lints an existing serve command instead."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from dflash_guard.cli.common import finish, progress
from dflash_guard.cli.options import Json, Quiet, chosen_format, parse_roots
from dflash_guard.errors import InputError
from dflash_guard.formats import FindingsReport, OutputFormat, PlainFormat
from dflash_guard.formats.text.launch import render_launch
from dflash_guard.pins.lockfile import lockfile_from_bytes, read_lockfile_bytes
from dflash_guard.trust.policy import load_policy


def launch(
    engine: Annotated[str, typer.Argument(
        metavar="ENGINE", help="vllm, llama.cpp, sglang, ollama (or omlx, --check only).")],
    command: Annotated[list[str] | None, typer.Argument(
        metavar="ARG", help="After `--`: more engine arguments (none that launch controls), "
                               "or with --check the whole command line to lint (ollama: "
                               "the Modelfile).")] = None,
    lock_path: Annotated[str, typer.Option("--lock", metavar="FILE",
                                           help="The lockfile.")] = "dflash.lock",
    policy: Annotated[str | None, typer.Option(
        "--policy", metavar="POLICY",
        help="default, strict, dev or a policy file (its `launch` section: caps, "
             "speculative method and tokens; reviewed_code for --trust-remote-code).")] = None,
    root: Annotated[list[str] | None, typer.Option(
        "--root", metavar="ROLE=DIR",
        help="ROLE=DIR: load that artifact from this folder, verified against the lock "
             "first (required for local artifacts and for llama.cpp); with --check, the command "
             "must load it from there.")] = None,
    host: Annotated[str, typer.Option("--host", metavar="ADDR",
                                      help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(
        "--port", metavar="PORT", min=1, max=65535,
        help="Port to bind (default 8000; ollama 11434).")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", metavar="NAME",
        help="Variable holding the API key (required when --host is not loopback).")] = None,
    trust_remote_code: Annotated[bool, typer.Option(
        "--trust-remote-code", help="Pass the engine's --trust-remote-code: refused unless the "
                                    "policy approves every .py file loaded by sha256.")] = False,
    baseline: Annotated[bool, typer.Option(
        "--baseline", help="Serve the target alone, no speculation (the diff's baseline).")
    ] = False,
    tokens: Annotated[int | None, typer.Option(
        "--num-speculative-tokens", metavar="N", min=1,
        help="Draft tokens per step (default: the policy's launch.num_speculative_tokens, else "
             "the drafter's block size less one, as the engines take it).")
    ] = None,
    program: Annotated[str | None, typer.Option(
        "--program", metavar="PROGRAM",
        help="The python (vllm, sglang) or llama-server to run (default: python3, "
             "llama-server); with --check vllm or sglang, the python whose vLLM or SGLang "
             "parser resolves the command (scripts/install-vllm.sh, scripts/install-sglang.sh)."
    )] = None,
    approval: Annotated[Path | None, typer.Option(
        "--approval", metavar="RECORD",
        help="Launch from this approval record (required by a policy with "
             "launch.require_approval, as strict): verified as verify-approval does it "
             "(policy digest, signature, lockfile, every folder), the engine proved to be the "
             "locked one (--program), then the command planned from the verified folders.")
    ] = None,
    trust_root: Annotated[Path | None, typer.Option(
        "--trust-root", metavar="JSON",
        help="With --approval: Sigstore trusted root (JSON) for offline verification.")] = None,
    wheelhouse: Annotated[Path | None, typer.Option(
        "--wheelhouse", metavar="DIR",
        help="With --approval: a folder holding the locked engine wheel (default "
             "./.wheelhouse; pip's cache is searched too).")] = None,
    execute: Annotated[bool, typer.Option(
        "--exec", help="Replace this process with the engine instead of printing, under a "
                       "Landlock ruleset: it reads only the verified folders' locked files, "
                       "writes only a scratch folder, binds only its ports (policy "
                       "launch.confinement: required refuses where that cannot be done).")
    ] = False,
    verify_served: Annotated[bool, typer.Option(
        "--verify-served",
        help="Start the engine as a child, confined as --exec confines it (the serving record "
             "names the ruleset by digest), diff what it serves against kernels_ref on the "
             "verified folders (logprobs, and the drafter's acceptance), write a serving record; "
             "a failed diff stops the engine (exit 1). With --exec the engine keeps serving, "
             "supervised; without, it is stopped after the check.")] = False,
    serving_record: Annotated[Path, typer.Option(
        "--serving-record", metavar="FILE",
        help="With --verify-served: where the serving record is written.")
    ] = Path("serving.json"),
    key: Annotated[Path | None, typer.Option(
        "--key", metavar="PEM",
        help="With --verify-served: sign the serving record with this ECDSA key (RECORD.sig; "
             "monitor --record checks it against the policy's approval signers).")] = None,
    ready_timeout: Annotated[float, typer.Option(
        "--ready-timeout", metavar="SECONDS", min=1.0,
        help="With --verify-served: how long the engine may take to serve, and to "
             "answer each request of the served diff.")] = 600.0,
    template: Annotated[Path | None, typer.Option(
        "--template", metavar="FILE",
        help="ollama: the Go template the Modelfile's TEMPLATE carries (its sha256 must be on "
             "the policy's reviewed_templates).")] = None,
    modelfile: Annotated[Path, typer.Option(
        "--modelfile", metavar="FILE",
        help="ollama: where the Modelfile is written (atomically, never over an input).")
    ] = Path("Modelfile"),
    check: Annotated[bool, typer.Option(
        "--check", help="Lint the command after `--` against the lock and policy.")] = False,
    fmt: Annotated[OutputFormat, typer.Option(
        "--format", metavar="[text|json|sarif]",
        help="text or json (--check: also sarif).")] = OutputFormat.text, as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Print the serve command that loads exactly the locked artifacts, or refuse (exit 1).

    Every folder is verified against the lock first (a Hub artifact's HF-cache snapshot at its
    locked commit), and the engine is given its path, never a repo id; binds 127.0.0.1 unless
    --host; the policy's `launch` caps become engine flags. With --approval RECORD the record
    is verified as verify-approval does it and --program must be the locked engine.

    --check ENGINE -- COMMAND... lints an existing serve command instead (scan findings).

    Example: dflash-guard launch vllm --root target=pair/target --root drafter=pair/drafter
    """
    from dflash_guard.launch.check import check_command
    from dflash_guard.launch.plan import LaunchOptions
    from dflash_guard.launch.run import Approval, run_launch
    from dflash_guard.trust.installed import candidate_wheels

    fmt = chosen_format(fmt, as_json)
    if engine == "omlx":  # a macOS app: its settings file is checked, its image verify-app's
        from dflash_guard.launch.omlx import check_settings

        if not check:
            raise InputError("launch omlx: oMLX is a macOS app; check its settings with "
                             "launch --check omlx SETTINGS, its image with verify-app")
        _finish_findings(check_settings(list(command or [])), fmt)

    lock_data = read_lockfile_bytes(lock_path)  # read once: planned from, and approved
    lock = lockfile_from_bytes(lock_data, lock_path)
    loaded_policy = load_policy(policy)
    roots = parse_roots(root or [])
    if check:
        given = {"--exec": execute, "--baseline": baseline,
                 "--trust-remote-code": trust_remote_code, "--num-speculative-tokens": tokens,
                 "--api-key-env": api_key_env, "--approval": approval,
                 "--wheelhouse": wheelhouse, "--trust-root": trust_root,
                 "--verify-served": verify_served, "--template": template}
        if mixed := [flag for flag, value in given.items() if value]:
            raise InputError(f"{mixed[0]}: not with --check (it lints the command after `--`)")
        with progress(quiet) as shown:
            report = check_command(lock, loaded_policy, engine, list(command or []), shown,
                                   python=program, roots=roots)
        report = dataclasses.replace(
            report, lock_path=lock_path,
            policy_path=policy if policy is not None and Path(policy).is_file() else None)
        _finish_findings(report, fmt)
    if fmt is OutputFormat.sarif:
        raise InputError("--format sarif: only with --check (a launch has no findings)")
    if engine == "ollama":
        _ollama_options(execute, verify_served, modelfile,
                        [("--lock", Path(lock_path)), ("--template", template),
                         ("--policy", Path(policy) if policy and Path(policy).is_file()
                          else None), *((f"--root {r}", p) for r, p in roots.items())])
    options = LaunchOptions(
        engine=engine, roots=roots, host=host,
        port=port or (11434 if engine == "ollama" else 8000), template=template,
        modelfile=modelfile,
        api_key_env=api_key_env, trust_remote_code=trust_remote_code, baseline=baseline,
        num_speculative_tokens=tokens, program=program, extra=tuple(command or []))
    approved = None if approval is None else Approval(
        approval, Path(lock_path), lock_data, trust_root,
        tuple(candidate_wheels((), wheelhouse)))
    if verify_served and serving_record.resolve() in {Path(lock_path).resolve(),
                                                      (approval or Path(lock_path)).resolve()}:
        raise InputError("--serving-record: the record would replace the lockfile or the "
                         "approval record")
    if key is not None:
        from dflash_guard.trust.signing import check_ec_private_key

        if not verify_served:
            raise InputError("--key: only with --verify-served (it signs the serving record)")
        check_ec_private_key(key)  # before the engine starts
    with progress(quiet) as shown:
        result = run_launch(lock, loaded_policy, options, shown, approved)
        if verify_served and result.passed and result.command is not None \
                and result.plan is not None:
            from dflash_guard.launch.served import ServedSettings, serve_confined

            rules = loaded_policy.launch
            settings = ServedSettings(serving_record, Path(lock_path), key=key,
                                      approval=approval, keep_serving=execute,
                                      ready_timeout_s=ready_timeout)
            verdict, code = serve_confined(
                lock, loaded_policy, result.plan, result.command, settings, shown,
                required=rules is not None and rules.confinement == "required",
                say=lambda line: typer.echo(line, err=True))
            if code is not None:
                raise typer.Exit(code)
            result = dataclasses.replace(result, outcome=verdict)
    if (execute and not verify_served and result.passed and result.command is not None
            and result.plan is not None):
        from dflash_guard.launch.confine import approved_files, exec_engine

        rules = loaded_policy.launch
        refused = exec_engine(result.command, result.plan, approved_files(lock, result.plan),
                              required=rules is not None and rules.confinement == "required",
                              say=lambda line: typer.echo(line, err=True))
        result = dataclasses.replace(result, outcome=refused)
    finish(result, PlainFormat(fmt.value), render_launch)


def _ollama_options(execute: bool, verify_served: bool, modelfile: Path,
                    inputs: list[tuple[str, Path | None]]) -> None:
    """What `launch ollama` cannot do, and a Modelfile that would replace an input."""
    from dflash_guard.outputs import refuse_outputs_over_inputs, refuse_unwritable

    if execute or verify_served:
        raise InputError(f"{'--exec' if execute else '--verify-served'}: not for ollama (run "
                         "the printed `ollama create` against an `ollama serve` bound to "
                         "loopback)")
    refuse_outputs_over_inputs([("--modelfile", modelfile)], inputs)
    refuse_unwritable([("--modelfile", modelfile)])


def register(app: typer.Typer) -> None:
    """Add `launch` to `app`."""
    app.command("launch")(launch)


def _finish_findings(report: FindingsReport, fmt: OutputFormat) -> NoReturn:
    """A lint's findings out through `finish` (text, JSON or SARIF)."""
    from dflash_guard.formats.sarif import render
    from dflash_guard.formats.text.findings import print_report

    finish(report, fmt, print_report, render_sarif=render)
