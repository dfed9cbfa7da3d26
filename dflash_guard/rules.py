"""The rule registry: every rule id dflash-guard reports (the scan's detectors, `launch --check`
and the advisory audit), its default severity, description and help.

Findings are made from these `Rule` objects (never an id string), `Finding` refuses an id that
is not registered, and the SARIF rules and the documented rule table are built from `RULES`. A
detector may report a rule above or below its default severity; the help says when (an
advisory finding always carries the advisory's own severity).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from dflash_guard.severity import Severity


@dataclasses.dataclass(frozen=True)
class Rule:
    """One scan rule: a stable id, the usual severity, a one-line description and help text."""

    id: str
    severity: Severity
    description: str
    help: str


UNSCANNABLE = Rule(
    "DG-UNSCANNABLE", Severity.high,
    "A file or archive member that cannot be scanned (never a silent pass).",
    "encrypted/corrupt zip member, 7z/rar/gzip, unreadable file, bad `.npy` header, a symlink "
    "leaving the folder, a symlinked folder, a special file (FIFO, device), a zip member over "
    "1 GiB, a JSON file over 64 MiB or nested too deep, a template nested too deep, a GGUF "
    "header over 4,096 keys, 65,536 tensors, 2^22 array items or a 64 MiB string, a pickle "
    "walk over 120 s, a compressed stream decompressing past 1 GiB (or lz4 without the `lz4` "
    "package), a tar or zip with over 100,000 members",
)
FORMAT_UNKNOWN = Rule(
    "DG-FORMAT-UNKNOWN", Severity.high,
    "A file not positively identified as a format no loader unpickles: a possible pickle.",
    "an unknown binary, a truncated or object `.npy`, an `.npz`, image or `tokenizer.model` "
    "that does not parse whole, a compressed or archived stream not fully decoded, a link "
    "inside an archive, invalid safetensors/GGUF/JSON, a shard an index names that is not "
    "its loader's format; counted with the pickle files, so `pickle_allowed: false` refuses it",
)
EXECUTABLE = Rule(
    "DG-EXECUTABLE", Severity.high,
    "A native executable, shared library or bytecode file in a model folder.",
    "ELF/PE/Mach-O, shebang script, `.so`, `.pyc` in the folder",
)
NOT_PICKLE = Rule(
    "DG-NOT-PICKLE", Severity.low,
    "A file with a pickle-family name whose content is not a pickle.",
    "pickle-family name, content is not a pickle",
)
PICKLE_PRESENT = Rule(
    "DG-PICKLE-PRESENT", Severity.low,
    "The file holds pickle streams (only allowlisted globals).",
    "pickle streams present, all globals allowlisted",
)
PICKLE_DANGEROUS_GLOBAL = Rule(
    "DG-PICKLE-DANGEROUS-GLOBAL", Severity.critical,
    "A pickle imports a known-dangerous global.",
    "os, subprocess, builtins.eval/exec/getattr, runpy, importlib, code, pty, socket, shutil, "
    "webbrowser, functools.partial, timeit, cProfile, pydoc...",
)
PICKLE_CLASS_GLOBAL = Rule(
    "DG-PICKLE-CLASS-GLOBAL", Severity.low,
    "A pickle instantiates a known harmless class that is not part of a state dict.",
    "training arguments (`training_args.bin`: `TrainingArguments`, its enums), tensor "
    "subclasses, `copyreg._reconstructor`: whether such pickles may load is the policy's "
    "`pickle_allowed`",
)
PICKLE_GLOBAL = Rule(
    "DG-PICKLE-GLOBAL", Severity.high,
    "A pickle imports a global that is not on the state-dict allowlist.",
    "any other global off the allowlist",
)
PICKLE_UNRESOLVED_GLOBAL = Rule(
    "DG-PICKLE-UNRESOLVED-GLOBAL", Severity.high,
    "A pickle imports a global whose name is computed.",
    "`STACK_GLOBAL` on computed names, `EXT*` codes",
)
PICKLE_BUILD_ON_GLOBAL = Rule(
    "DG-PICKLE-BUILD-ON-GLOBAL", Severity.high,
    "A pickle's BUILD rewrites attributes of an imported global.",
    "`BUILD` rewriting an imported class or module",
)
PICKLE_INVALID = Rule(
    "DG-PICKLE-INVALID", Severity.high,
    "A truncated or malformed pickle stream.",
    "truncated or malformed pickle (the prefix still runs)",
)
PICKLE_TRAILING = Rule(
    "DG-PICKLE-TRAILING", Severity.low,
    "Bytes after the last pickle look like a broken pickle.",
    "bytes after the last pickle look like a broken pickle",
)
ZIP_CRC = Rule(
    "DG-ZIP-CRC", Severity.high,
    "A zip member fails its CRC check.",
    "zip member fails its CRC (its content is scanned anyway)",
)
ZIP_POLYGLOT = Rule(
    "DG-ZIP-POLYGLOT", Severity.high,
    "A zip that two readers (zipfile, torch's miniz) could read differently.",
    "several end-of-central-directory records, overlapping or duplicate members, a local "
    "header name differing from the central directory, bytes before the first member, a "
    "pickle that also opens as a zip",
)
MODELSCAN = Rule(
    "DG-MODELSCAN", Severity.high,
    "modelscan's denylist flagged an unsafe operator.",
    "modelscan denylist hit, at the severity modelscan gives it",
)
MODELSCAN_ERROR = Rule(
    "DG-MODELSCAN-ERROR", Severity.low,
    "modelscan could not scan the file (our own pass still did).",
    "modelscan failed on the file (our pass still ran)",
)
ST_TRUNCATED = Rule(
    "DG-ST-TRUNCATED", Severity.high,
    "A safetensors file is shorter than its header says.",
    "safetensors file shorter than its header length or its tensors",
)
ST_LENGTH = Rule(
    "DG-ST-LENGTH", Severity.high,
    "A safetensors header length is larger than the file or the limit.",
    "safetensors header length larger than the file or the 100 MB limit",
)
ST_HEADER = Rule(
    "DG-ST-HEADER", Severity.high,
    "A safetensors header is not a valid JSON object.",
    "safetensors header not a JSON object, or `__metadata__` not strings to strings",
)
ST_DUPLICATE_KEY = Rule(
    "DG-ST-DUPLICATE-KEY", Severity.high,
    "A safetensors header repeats a JSON key.",
    "safetensors header repeats a JSON key",
)
ST_TENSOR = Rule(
    "DG-ST-TENSOR", Severity.high,
    "A safetensors tensor entry has a bad dtype, shape or byte span.",
    "safetensors tensor entry with a bad dtype, shape or byte span",
)
ST_TRAILING = Rule(
    "DG-ST-TRAILING", Severity.high,
    "Bytes after the last tensor of a safetensors file.",
    "bytes after the last tensor of a safetensors file",
)
ST_POLYGLOT = Rule(
    "DG-ST-POLYGLOT", Severity.high,
    "A zip, pickle, numpy or GGUF signature inside a safetensors file.",
    "zip/pickle/numpy/GGUF signature in the header, after the data or as a zip end record",
)
ST_METADATA_PAYLOAD = Rule(
    "DG-ST-METADATA-PAYLOAD", Severity.high,
    "A safetensors metadata value carries a serialized object.",
    "`__metadata__` value holding pickle bytes or a YAML `!!python` tag, also inside base64, "
    "hex or zlib/gzip/bz2/xz anywhere in the value (up to 3 layers, bounded)",
)
ST_INVALID = Rule(
    "DG-ST-INVALID", Severity.high,
    "The safetensors loader rejects the file.",
    "rejected by the `safetensors` loader",
)
ST_INDEX = Rule(
    "DG-ST-INDEX", Severity.high,
    "A sharded index that is not valid JSON or has no weight_map.",
    "sharded index not valid JSON or without a `weight_map`",
)
ST_INDEX_PATH = Rule(
    "DG-ST-INDEX-PATH", Severity.high,
    "A shard path that points outside the checkpoint folder.",
    "shard path outside the checkpoint folder",
)
ST_INDEX_MISSING = Rule(
    "DG-ST-INDEX-MISSING", Severity.high,
    "A shard named in the index is missing.",
    "shard named in the index is missing",
)
ST_INDEX_TENSOR = Rule(
    "DG-ST-INDEX-TENSOR", Severity.high,
    "A tensor missing from its shard, in two shards, or not indexed.",
    "tensor missing from its shard or in two shards; medium: a tensor the index does not list",
)
GGUF_MALFORMED = Rule(
    "DG-GGUF-MALFORMED", Severity.high,
    "A GGUF header llama.cpp's reader refuses or that does not fit the file.",
    "GGUF refused by the bounded reader (llama.cpp's own refusals: version, empty or repeated "
    "key, nested arrays, unknown type, alignment, tensor names, dimensions, blocks; counts past "
    "the end of the file)",
)
GGUF_TENSORS = Rule(
    "DG-GGUF-TENSORS", Severity.high,
    "A GGUF tensor table llama.cpp would refuse or misread.",
    "data misaligned, out of order, overlapping, with a gap or past the end of the file; "
    "`block_count`, attention head counts, a block missing a tensor the others have, "
    "`embedding_length` and the vocabulary against `token_embd`/`output` (or missing)",
)
GGUF_METADATA = Rule(
    "DG-GGUF-METADATA", Severity.high,
    "GGUF metadata missing or of the wrong type.",
    "unreadable or non-string chat template field; token scores or types of the wrong type or "
    "shorter than the tokens, tokens or merges not strings; a tokenizer model or BPE "
    "pre-tokenizer llama.cpp does not know, BPE without merges (its loader refuses each); "
    "medium: no `general.architecture`",
)
GGUF_TOKENS = Rule(
    "DG-GGUF-TOKENS", Severity.high,
    "GGUF token metadata that makes llama.cpp end or cut answers on ordinary text.",
    "an end-of-generation id (`eos`, `eot`, `eom`, FIM pad/repo/separator) or a CONTROL token "
    "type on ordinary text: a BPE merge's product, one character, or a piece with none of the "
    "marker characters every real special token has (`<`, `>`, `[`, `]`, the vertical bar)",
)
TPL_SYNTAX = Rule(
    "DG-TPL-SYNTAX", Severity.medium,
    "A chat template that does not parse.",
    "chat template that Jinja cannot parse",
)
TPL_DUNDER = Rule(
    "DG-TPL-DUNDER", Severity.critical,
    "A chat template reaches dunder or internal attributes (SSTI).",
    "dunder/internal attribute or subscript (critical), dunder string constants (high)",
)
TPL_COMPUTED_ATTR = Rule(
    "DG-TPL-COMPUTED-ATTR", Severity.high,
    "A chat template subscripts with a name built at render time.",
    "subscript with a name computed at render time",
)
TPL_ATTR_FILTER = Rule(
    "DG-TPL-ATTR-FILTER", Severity.high,
    "A chat template uses the |attr filter.",
    "the `\\|attr` filter",
)
TPL_ESCAPED_NAME = Rule(
    "DG-TPL-ESCAPED-NAME", Severity.high,
    "A chat template hides underscores with escapes.",
    "`\\x5f` and similar escapes hiding underscores",
)
TPL_RISKY_GLOBAL = Rule(
    "DG-TPL-RISKY-GLOBAL", Severity.medium,
    "A chat template uses a global that leads to __globals__.",
    "`lipsum`/`cycler`/`joiner`/`namespace`/`self`... (paths to `__globals__`)",
)
TPL_UNLISTED = Rule(
    "DG-TPL-UNLISTED", Severity.high,
    "A chat template uses a construct outside the subset real templates use.",
    "a syntax node, call, method, filter or test outside the grammar in "
    "`templates/grammar.py` (measured on the 71 templates of the pinned llama.cpp tree)",
)
TPL_INCLUDE = Rule(
    "DG-TPL-INCLUDE", Severity.high,
    "A chat template loads another template.",
    "include/import/extends",
)
TPL_COST = Rule(
    "DG-TPL-COST", Severity.high,
    "A chat template costs more than the render budget.",
    "a trial render past the budget (steps, output, value sizes, wall time), nested constant "
    "loops or a constant width/repeat past it",
)
TPL_EXFIL = Rule(
    "DG-TPL-EXFIL", Severity.high,
    "A chat template writes the conversation into a URL to another host.",
    "a markdown image/link or HTML src/href carrying conversation text, or any remote image",
)
TPL_INJECTED = Rule(
    "DG-TPL-INJECTED", Severity.medium,
    "A chat template adds an instruction of its own to the conversation.",
    "an unknown template adding more constant words than role markers to a system turn",
)
TPL_UNREVIEWED = Rule(
    "DG-TPL-UNREVIEWED", Severity.low,
    "A chat template that is neither a known published one nor reviewed.",
    "sha256 not in `templates/known.json` nor the policy's `reviewed_templates` (the tier's "
    "`templates: reviewed-only` refuses it in the gate)",
)
CONFIG_INVALID = Rule(
    "DG-CONFIG-INVALID", Severity.medium,
    "A config file that cannot be read.",
    "unreadable config JSON",
)
TOKENIZER_REGEX = Rule(
    "DG-TOKENIZER-REGEX", Severity.high,
    "A tokenizer.json regex the tokenizers library fails or hangs on.",
    "a pattern the real library, in a child with a deadline and a memory cap, cannot compile "
    "or panics or runs past the deadline on a probe (medium: the library refuses the file)",
)
TOKENS_MEANING = Rule(
    "DG-TOKENS-MEANING", Severity.high,
    "Token metadata that makes engines end or cut answers on ordinary text.",
    "an `eos_token_id` (generation_config.json, config.json, `text_config`) that is an ordinary "
    "vocabulary entry; an added token marked special whose text is one character or holds none "
    "of the marker characters every real special token has (`<`, `>`, `[`, `]`, the vertical "
    "bar)",
)
GENERATION_DEFAULTS = Rule(
    "DG-GENERATION-DEFAULTS", Severity.high,
    "A generation_config.json or GGUF whose defaults change or cut every answer the engine "
    "gives.",
    "a loaded `generation_config.json` (or, without one, `config.json`'s `max_new_tokens`) that "
    "vLLM applies to every request: a penalty other than neutral, a `max_new_tokens`, a value of "
    "the wrong type or not finite, a file that is not a JSON object (medium: a sampling default, "
    "`temperature`, `top_k`, `top_p`, `min_p`, in a file that is not a published one of "
    "`scan/generation_known.json`); a GGUF's `general.sampling.*` that llama.cpp applies to "
    "every request: what changes a temperature-0 answer (a repeat penalty or XTC before the "
    "temperature, a sequence without it or with infill before it), a mirostat llama.cpp aborts "
    "on, a key of the wrong GGUF type or not finite (medium: any other value that is not "
    "llama.cpp's default); a file whose sha256 is on the policy's `reviewed_files` is quiet",
)
TOKENIZER_REWRITE = Rule(
    "DG-TOKENIZER-REWRITE", Severity.high,
    "A tokenizer whose pipeline gives back other text than it was given.",
    "the real `tokenizers` library, in the regex check's child, decodes its own encoding of an "
    "ordinary text (the built-in prompts; code, whitespace, accents, CJK, emoji) to other text: "
    "a normalizer, pre-tokenizer, model or decoder rewrites what the model reads or writes",
)
UPSTREAM_DIFF = Rule(
    "DG-UPSTREAM-DIFF", Severity.high,
    "A loaded tokenizer, generation-config or chat-template file that is not the upstream's.",
    "the policy names the model's upstream for its role (`upstream:`, locked as `ROLE-upstream`) "
    "and a loaded file of `pins.lockfile.UPSTREAM_FILES` or `additional_chat_templates/*.jinja` "
    "differs from the upstream's in what the engine reads (the canonical JSON of a `.json` file, "
    "the bytes of others), cannot be read to compare, or the upstream ships no such file; each "
    "difference is spelled out (medium: the upstream ships a compared file the folder lacks; "
    "high for a missing generation_config.json, whose defaults vLLM then takes from "
    "config.json); a GGUF llama.cpp loads whose vocabulary is not the upstream tokenizer.json's "
    "as the converter writes it (a token's text, a CONTROL or NORMAL type, the merges, the eos "
    "id); a file whose sha256 is on the policy's `reviewed_files` is quiet",
)
UPSTREAM_NONE = Rule(
    "DG-UPSTREAM-NONE", Severity.medium,
    "A loaded tokenizer file that no upstream vouches for.",
    "a loaded tokenizer file (of `pins.lockfile.UPSTREAM_FILES`, or the one "
    "`fast_tokenizer_files` selects) that is not a published file of "
    "the catalog (`scan/upstream_known.json`) under that name, or cannot be read, or tokenizer "
    "files that no one model of the catalog publishes together, of a model whose role has no "
    "upstream in the policy; a file whose sha256 is on the policy's `reviewed_files` is quiet",
)
RC_PROCESS = Rule(
    "DG-RC-PROCESS", Severity.critical,
    "Remote code runs processes.",
    "`os.system/popen/exec*/spawn*`, `subprocess`, `pty`, and helpers that spawn "
    "(`scan/code/capabilities.py`) (critical: a call, high: an import)",
)
RC_NETWORK = Rule(
    "DG-RC-NETWORK", Severity.high,
    "Remote code uses the network.",
    "`socket`, `urllib`, `requests`, `httpx`, `http`, `aiohttp`..., and helpers that connect "
    "(Hub uploads and downloads, `from_pretrained` of a repo id, log handlers that ship records)",
)
RC_DYNAMIC_CODE = Rule(
    "DG-RC-DYNAMIC-CODE", Severity.high,
    "Remote code evaluates, compiles or imports code dynamically.",
    "`compile`, `__import__`, `importlib`, `marshal`, `pickle`, `ctypes`, computed `getattr` "
    "on modules, `__globals__`/`__code__`/`__subclasses__`/frames, a capability module handed "
    "on as a value, `sys.path` changes (critical: `eval`/`exec`)",
)
RC_ENCODED_BLOB = Rule(
    "DG-RC-ENCODED-BLOB", Severity.high,
    "Remote code decodes or carries an encoded payload.",
    "base64/zlib/hex/codecs decoding, long encoded constants",
)
RC_CREDENTIALS = Rule(
    "DG-RC-CREDENTIALS", Severity.high,
    "Remote code reads the environment or credential files.",
    "tokens, `.ssh`, `.netrc`... also as paths built from pieces; `os.environ` read whole or "
    "by a computed key",
)
RC_FS_WRITE = Rule(
    "DG-RC-FS-WRITE", Severity.high,
    "Remote code writes, moves or deletes files.",
    "writes, deletes, moves, chmod (medium: `open('relative/path', 'w')` in the folder)",
)
RC_IMPORT_TIME_SIDE_EFFECT = Rule(
    "DG-RC-IMPORT-TIME-SIDE-EFFECT", Severity.low,
    "Remote code does something when imported.",
    "a call above made at import time (module level, class body, default argument, "
    "decorator), one level above that call's severity; low: other module-level calls",
)
RC_MONKEY_PATCH = Rule(
    "DG-RC-MONKEY-PATCH", Severity.high,
    "Remote code changes modules, builtins or the environment other code relies on.",
    "`setattr(torch, ...)`, `torch.x = ...`, `sys.modules[...] = ...`, `globals().update`, "
    "`builtins` writes, `add_safe_globals`, global module hooks (low: a literal into a "
    "`config`/`backends` setting, a non-credential environment variable)",
)
RC_NESTED_REMOTE_CODE = Rule(
    "DG-RC-NESTED-REMOTE-CODE", Severity.high,
    "Remote code loads another repository's remote code.",
    "`trust_remote_code=True` or `custom_pipelines` passed to a loader (also through a dict), "
    "`dynamic_module_utils`, PEFT `auto_mapping.parent_library`",
)
RC_UNUSUAL_IMPORT = Rule(
    "DG-RC-UNUSUAL-IMPORT", Severity.low,
    "Remote code imports a module outside the list of what model code usually uses (information).",
    "import outside torch, transformers, math, typing, einops, flash_attn, tokenizers... "
    "(see `scan/code/catalog.py`); `from X import *`",
)
RC_UNPARSEABLE = Rule(
    "DG-RC-UNPARSEABLE", Severity.high,
    "A Python file that does not parse.",
    "`.py` that does not parse",
)
RC_UNREVIEWED = Rule(
    "DG-RC-UNREVIEWED", Severity.low,
    "Remote code whose sha256 is not in the reviewed set.",
    "sha256 not in `--reviewed`",
)
RC_MISSING = Rule(
    "DG-RC-MISSING", Severity.high,
    "An auto_map target whose file is not in the folder.",
    "`auto_map` target file absent from the folder",
)
RC_REMOTE_REPO = Rule(
    "DG-RC-REMOTE-REPO", Severity.high,
    "An auto_map target in another repository's code.",
    "`auto_map` into another repo (`org/repo--module.Class`)",
)
DRAFTER_ARCH = Rule(
    "DG-DRAFTER-ARCH", Severity.medium,
    "A drafter architecture dflash-guard does not know.",
    "architectures not `DFlashDraftModel`/`DFlash2DraftModel`",
)
DRAFTER_MASK = Rule(
    "DG-DRAFTER-MASK", Severity.high,
    "mask_token_id missing, outside the vocabulary or aliasing a special id.",
    "`mask_token_id` missing, outside the vocab, or = a target pad/eos/bos/stop id or special "
    "token (config, generation_config, tokenizer_config, special_tokens_map, tokenizer.json, "
    "chat-template control tokens); medium: a `mask_token` text no tokenizer file defines",
)
DRAFTER_LAYERS = Rule(
    "DG-DRAFTER-LAYERS", Severity.high,
    "target_layer_ids or num_target_layers disagree with the target.",
    "`target_layer_ids` outside the target's layers or repeated; `num_target_layers` differs; "
    "`num_hidden_layers` against the `layers.N` weights "
    "(medium: the target has no layer count, also under `text_config`; or the target's last "
    "layer, on which llama.cpp aborts and engines disagree on the features)",
)
DRAFTER_CONFLICT = Rule(
    "DG-DRAFTER-CONFLICT", Severity.high,
    "A drafter field set differently at the top level and in dflash_config.",
    "top-level and `dflash_config` values disagree (engines pick different ones; the nested one "
    "is checked, as SGLang reads it)",
)
DRAFTER_SHAPE = Rule(
    "DG-DRAFTER-SHAPE", Severity.high,
    "hidden_size, vocab_size or head_dim incompatible with the target.",
    "`hidden_size`/`vocab_size` incompatible; `fc.weight` not `len(target_layer_ids) * "
    "hidden_size` wide (medium: `head_dim` different, or missing on one side and not derivable)",
)
DRAFTER_BLOCK = Rule(
    "DG-DRAFTER-BLOCK", Severity.medium,
    "block_size outside 2..64.",
    "`block_size` outside 2..64",
)
DRAFTER_CONV_SELECTOR = Rule(
    "DG-DRAFTER-CONV-SELECTOR", Severity.high,
    "A DFlash 2 drafter's convolution or selector fields that no engine can run.",
    "`DFlash2DraftModel`: `conv_group_size`/`conv_kernel_size`/`selector_rank`/`selector_top_k` "
    "missing or not positive integers, `hidden_size % conv_group_size != 0`, `selector_top_k` "
    "over the vocabulary or `hidden_size < top_k * (top_k + 1)` (llama.cpp's packing); medium: "
    "`conv_kernel_size` over `block_size` (the extra taps read only zeros)",
)
DRAFTER_WEIGHTS = Rule(
    "DG-DRAFTER-WEIGHTS", Severity.high,
    "A drafter tensor holds NaN or infinity.",
    "every float of the drafter's safetensors read (bounded reads, no mmap): a NaN or an infinity "
    "is high (a drafter that loads everywhere and accepts nothing); medium: a float format torch "
    "cannot view (F4, F6_*, F8_E8M0), left unchecked; the file unreadable to its end is high",
)
WEIGHTS_NONFINITE = Rule(
    "DG-WEIGHTS-NONFINITE", Severity.high,
    "A tensor of the target (or another model scanned with the finite check) holds NaN or "
    "infinity.",
    "with `scan.target_finite` (strict) or `scan --finite-weights`: every float of the loaded "
    "safetensors read as for DG-DRAFTER-WEIGHTS; a NaN or an infinity is high (a target's NaN "
    "rows decode alike with and without the drafter, so the lossless diff cannot see them); "
    "medium: a float format torch cannot view; the file unreadable to its end is high",
)
DRAFTER_PARAMS = Rule(
    "DG-DRAFTER-PARAMS", Severity.medium,
    "The drafter's parameter count exceeds the budget.",
    "parameters (from safetensors headers) over `--param-budget` (default 3e9)",
)


LAUNCH_UNPINNED = Rule(
    "DG-LAUNCH-UNPINNED", Severity.high,
    "A serve command loads a Hub repo without pinning the locked commit.",
    "`launch --check`: no `--revision`, or a branch or tag (`main`) instead of the 40-hex commit",
)
LAUNCH_NOT_LOCKED = Rule(
    "DG-LAUNCH-NOT-LOCKED", Severity.high,
    "A serve command loads a model or drafter that is not the locked one.",
    "`launch --check`: another repo or commit, a folder or GGUF whose files differ from the "
    "lock, a path not on this machine, an unreadable speculative config",
)
LAUNCH_REMOTE_CODE = Rule(
    "DG-LAUNCH-REMOTE-CODE", Severity.high,
    "A serve command trusts remote code the policy has not approved.",
    "`launch --check`: `--trust-remote-code` over `.py` files not in `reviewed_code`, a tier "
    "that denies remote code, or code taken from another repo",
)
LAUNCH_EXPOSED = Rule(
    "DG-LAUNCH-EXPOSED", Severity.high,
    "A serve command binds outside loopback without an API key.",
    "`launch --check`: `--host` (or the engine's default, 0.0.0.0 for vLLM) not loopback and "
    "no `--api-key`",
)
LAUNCH_CAPS = Rule(
    "DG-LAUNCH-CAPS", Severity.medium,
    "A serve command misses or exceeds a resource cap of the policy's `launch` section.",
    "`launch --check`: e.g. no `--max-num-seqs`, or a `--max-model-len` over the cap",
)
LAUNCH_SPECULATIVE = Rule(
    "DG-LAUNCH-SPECULATIVE", Severity.medium,
    "A serve command's speculative method or token count differs from the policy's.",
    "`launch --check`: `launch.speculative_method` / `launch.num_speculative_tokens`",
)
LAUNCH_UNLISTED = Rule(
    "DG-LAUNCH-UNLISTED", Severity.high,
    "A serve command sets something `launch` would not pass through: it may change what is "
    "loaded or how code is trusted.",
    "`launch --check`: as the engine's own parser resolves it, e.g. `--tokenizer`, `--config`, "
    "a dotted `--speculative-config.model`, `--hf-overrides`, llama.cpp `-mu URL`",
)

ADV_AFFECTED = Rule(
    "DG-ADV-AFFECTED", Severity.high,
    "A locked engine commit, Hub revision or package version is affected by an OSV advisory.",
    "`audit` and the gate's advisories step; reported with the advisory's own severity",
)
ADV_UNKNOWN = Rule(
    "DG-ADV-UNKNOWN", Severity.high,
    "An advisory range over a locked subject could not be decided (a GIT range without a "
    "local clone, an engine whose identity or release is not proven): never reported as clean.",
    "`audit` without `--engine-repo NAME=CLONE` for a GIT range, an engine with no proven "
    "release for its package's advisory or with an unproven identity; the advisory's own "
    "severity",
)
ADV_FEED = Rule(
    "DG-ADV-FEED", Severity.critical,
    "An advisory feed is refused: a signature that fails, unsigned where signatures are "
    "required, or older than the maximum age.",
    "`audit` (SARIF) for each refused feed; the gate refuses on it",
)
AUDIT_RULES = (ADV_AFFECTED, ADV_UNKNOWN, ADV_FEED)


def _registry(rules: list[Rule]) -> Mapping[str, Rule]:
    by_id: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in by_id:
            raise ValueError(f"scan rule {rule.id} is registered twice")
        by_id[rule.id] = rule
    return MappingProxyType(by_id)


# Every rule defined above (so none can be left out), by id, in the order the README lists them.
RULES: Mapping[str, Rule] = _registry([v for v in dict(globals()).values() if isinstance(v, Rule)])


def rule(rule_id: str) -> Rule:
    """The registered rule `rule_id`; raises `KeyError` naming it when there is none."""
    try:
        return RULES[rule_id]
    except KeyError:
        raise KeyError(f"{rule_id} is not a registered scan rule") from None


def markdown_table() -> str:
    """The README's table of rules (`| rule | default severity | meaning |`)."""
    lines = ["| rule | default severity | meaning |", "| --- | --- | --- |"]
    lines += [f"| {r.id} | {r.severity.name} | {r.help} |" for r in RULES.values()]
    return "\n".join(lines) + "\n"
