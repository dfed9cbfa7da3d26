"""What remote code may import and which resolved names are actions (the tables of the rules).

Names here are fully qualified after `names.Names.resolve` (`os.popen`, `eval`, `torch.hub.load`):
an alias, a re-binding, a `getattr` with a constant name or a lookup through `sys.modules` or
`__builtins__` all end up as the same name, so each table lists a name once.
"""

from __future__ import annotations

import ast
import re

from dflash_guard import rules
from dflash_guard.rules import Rule
from dflash_guard.scan.code import capabilities
from dflash_guard.severity import Severity

# Modules that modeling, configuration and tokenizer code of published models imports. An import
# of anything else is information for the reviewer (DG-RC-UNUSUAL-IMPORT, low: severity comes
# from capabilities, never from an unfamiliar name); the dangerous calls of the allowed ones
# (`os.system`, `importlib.import_module`, `shutil.rmtree`...) are findings of their own.
ALLOWED_IMPORTS = frozenset(
    {
        "__future__", "abc", "accelerate", "asyncio", "apex", "argparse", "array", "base64",
        "bisect", "bitsandbytes", "collections", "contextlib", "copy", "dataclasses", "datetime",
        "deepspeed", "einops", "enum", "flash_attn", "fractions", "functools", "gc", "hashlib",
        "heapq", "huggingface_hub", "importlib", "inspect", "io", "itertools", "json", "logging",
        "math", "numbers", "numpy", "operator", "os", "packaging", "pathlib", "peft", "PIL",
        "queue", "random", "re", "regex", "safetensors", "scipy", "sentencepiece", "shutil",
        "string", "struct", "sys", "tempfile", "textwrap", "threading", "tiktoken", "time",
        "timm", "tokenizers", "torch", "torchvision", "tqdm", "transformers",
        "transformers_stream_generator", "triton", "types", "typing", "typing_extensions",
        "unicodedata", "uuid", "warnings", "weakref", "xformers",
    }
)
# Modules that are a capability in every function (their documented purpose, in the Python
# library reference or their own docs, is the source); helpers of other modules that reach a
# capability are `capabilities.ENTRIES`, each with its source.
# spawn: CPython Doc/library/subprocess.rst, pty.rst, multiprocessing.rst; pip, pexpect, sh, plumbum
PROCESS_MODULES = frozenset(
    {"subprocess", "pty", "_posixsubprocess", "multiprocessing", "pip", "ensurepip", "pexpect",
     "sh", "plumbum"}
)
# connect: CPython Doc/library/socket.rst, ssl, urllib.request, http.client, ftplib, smtplib,
# xmlrpc, poplib, imaplib, nntplib, socketserver, webbrowser; requests, httpx, aiohttp, urllib3...
NETWORK_MODULES = frozenset(
    {
        "socket", "ssl", "urllib", "urllib2", "urllib3", "requests", "httpx", "http", "aiohttp",
        "ftplib", "smtplib", "telnetlib", "paramiko", "websocket", "websockets", "webbrowser",
        "xmlrpc", "poplib", "imaplib", "nntplib", "socketserver", "asyncore", "asynchat", "grpc",
        "zmq", "pycurl", "fsspec",
        # clients of storage services and downloaders: their whole purpose is the network
        "boto3", "botocore", "s3fs", "gcsfs", "httplib2", "wget", "gdown", "modelscope",
        "tornado", "twisted", "redis", "pymongo", "kafka", "paho", "mechanize",
    }
)
# load code or pickles: CPython Doc/library/marshal.rst, pickle, ctypes, runpy, code, codeop,
# zipimport, pkgutil, imp, shelve, copyreg; dill, cloudpickle, cffi, jsonpickle, pyximport
DYNAMIC_MODULES = frozenset(
    {
        "marshal", "pickle", "_pickle", "dill", "cloudpickle", "ctypes", "cffi", "runpy", "code",
        "codeop", "zipimport", "pkgutil", "imp", "shelve", "jsonpickle", "pyximport", "copyreg",
    }
)
# Builtins reached by bare name (after `builtins.X` / `__builtins__[...]` are normalised to `X`).
BUILTIN_NAMES = frozenset(
    {"eval", "exec", "compile", "__import__", "getattr", "setattr", "delattr", "open", "globals",
     "vars", "locals", "breakpoint", "input"}
)
CODE_SINKS = frozenset(
    {"eval", "exec", "compile", "pickle.loads", "pickle.load", "marshal.loads", "marshal.load",
     "dill.loads", "cloudpickle.loads", "types.FunctionType", "types.CodeType"}
)
_OS_PROCESS = re.compile(
    r"^(os|posix|nt)\.(system|popen|exec\w*|spawn\w*|fork\w*|posix_spawn\w*|kill\w*)$"
)
_OS_WRITE = frozenset(
    {"open", "remove", "unlink", "rmdir", "removedirs", "rename", "renames", "replace", "chmod",
     "chown", "symlink", "link", "makedirs", "mkdir", "truncate", "write", "mkfifo"}
)
_SHUTIL_WRITE = frozenset(
    {"copy", "copy2", "copyfile", "copyfileobj", "copytree", "move", "rmtree", "chown",
     "make_archive", "unpack_archive", "copymode", "copystat"}
)
_PATH_WRITE = frozenset(
    {"write_text", "write_bytes", "unlink", "rmdir", "rmtree", "touch", "symlink_to", "hardlink_to",
     "extractall", "rename", "chmod", "lchmod"}
)
DECODERS = frozenset(
    {"b64decode", "b32decode", "b16decode", "a85decode", "b85decode", "decodebytes",
     "standard_b64decode", "urlsafe_b64decode", "decompress", "unhexlify", "fromhex",
     "a2b_base64", "a2b_hex"}
)
_DECODER_MODULES = frozenset(
    {"base64", "zlib", "binascii", "bytes", "lzma", "bz2", "gzip", "codecs"}
)
# getattr(module, computed) on these reads data (an operator, a dtype, an activation): not code.
DATA_MODULES = frozenset({"operator", "math", "torch", "torch.nn", "torch.nn.functional", "numpy"})
# `TOKENIZERS_PARALLELISM` is a setting, not a credential: TOKEN must not start TOKENIZER.
CREDENTIAL_ENV = re.compile(r"TOKEN(?!IZER)|SECRET|PASSW|API_?KEY|ACCESS_KEY|CREDENTIAL|AUTH",
                            re.I)
CREDENTIAL_PATHS = re.compile(
    r"huggingface/token\b|stored_tokens|\.ssh\b|id_rsa|id_ed25519|\.netrc|\.aws/|\.git-credentials|"
    r"\.docker/config\.json|\.kube/config|\.pypirc|\.npmrc|\.config/gcloud|\.azure/|\.gnupg|"
    r"\.kaggle/kaggle\.json|\.config/gh/hosts|/etc/shadow|/proc/[^/]+/environ",
    re.IGNORECASE,
)
SITE_PACKAGES = re.compile(r"site-packages|dist-packages|sitecustomize|usercustomize")
ENCODED_BLOB = re.compile(r"^(?:[A-Za-z0-9+/]{200,}={0,2}|[0-9a-fA-F]{200,})$")
# Calls that write their path argument (judged by the path: outside the folder is high).
SAVERS = frozenset({"save", "savez", "savez_compressed", "save_file", "dump", "tofile", "to_csv",
                    "savetxt", "save_pretrained", "to_json_file", "to_filename",
                    # CPython Lib/logging/__init__.py FileHandler, basicConfig(filename=...)
                    "FileHandler", "RotatingFileHandler", "TimedRotatingFileHandler",
                    "WatchedFileHandler", "basicConfig",
                    # sqlite3.connect / dbm.open create the file; numpy.memmap(mode="w+")
                    "connect", "memmap",
                    # tempfile writes in the system temporary folder unless `dir=` says else
                    "mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory",
                    "TemporaryFile", "SpooledTemporaryFile",
                    # tarfile/zipfile extract(member, path); filelock creates its lock file
                    "extract", "FileLock", "SoftFileLock"})
# Attributes that reach a function's globals, its code or every class of the interpreter: the
# classic ways out of any name-based rule (`(lambda: 0).__globals__`, `().__class__.__base__`).
INTROSPECTION = frozenset(
    {"__globals__", "__builtins__", "__code__", "__closure__", "__subclasses__",
     "__getattribute__", "__reduce__", "__reduce_ex__", "func_globals",
     "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "gi_frame", "gi_code", "cr_frame",
     "cr_code", "ag_frame", "ag_code", "tb_frame", "co_code", "co_consts"}
)
# Modules that are capabilities in themselves: one handed around as a value (stored, returned,
# passed, put in a container or a default) reaches its functions where no rule can follow it.
CAPABILITY_MODULES = PROCESS_MODULES | NETWORK_MODULES | DYNAMIC_MODULES | frozenset(
    {"os", "posix", "nt", "sys", "builtins", "importlib", "shutil", "io", "site", "tempfile"}
)
# A module reached through another one's attribute (`torch.os`, `os.path.os`, `shutil.os`) is
# that module: a chain is re-rooted at the last of these it names.
REROOT = frozenset(
    {"os", "posix", "nt", "sys", "builtins", "subprocess", "importlib", "shutil", "socket",
     "pickle", "_pickle", "marshal", "ctypes", "runpy", "requests", "urllib", "urllib3", "http",
     "pty", "dill", "cloudpickle", "pkgutil", "zipimport", "multiprocessing", "copyreg"}
)
# Calls that change how other code loads weights or runs modules, process-wide.
_PATCHERS = (
    "torch.serialization.add_safe_globals", "torch.serialization.safe_globals",
    "torch.serialization.register_package", "torch.nn.modules.module.register_module_",
    "torch.nn.modules.register_module_", "sys.path.", "sys.path_importer_cache",
)
_UNPICKLERS = frozenset(
    {"joblib.load", "pandas.read_pickle", "yaml.unsafe_load", "yaml.unsafe_load_all",
     "yaml.full_load", "yaml.full_load_all", "yaml.Loader", "yaml.UnsafeLoader",
     "yaml.FullLoader"}
)
HF_TOKEN_NAMES = re.compile(r"TOKEN_PATH|STORED_TOKENS|^HF_TOKEN$|get_token|whoami")
SAVE_METHODS = re.compile(r"^_?(save\w*|to_json_file|write_vocab\w*)$")

# Submodules of a capability package that do no input or output themselves.
PURE_SUBMODULES = ("urllib.parse", "http.HTTPStatus")
# Stores of a literal into these are settings (`torch.backends.cuda.matmul.allow_tf32 = True`,
# `torch._dynamo.config.cache_size_limit = 64`), not code other modules run.
SETTINGS = re.compile(r"(^|\.)(config|backends|flags)(\.|$)")

Action = tuple[Rule, Severity, str]


def action(name: str, call: ast.Call | None = None) -> Action | None:
    """The rule, severity and wording of calling the resolved `name` (with the arguments of
    `call` where an entry depends on them), or None for a harmless one."""
    root = name.split(".")[0]
    last = name.rsplit(".", 1)[-1]
    if name.startswith(PURE_SUBMODULES):
        return None
    if (entry := capabilities.find(name, call)) is not None:
        return entry.capabilities[0].rule, entry.severity, entry.message(name)
    if name in ("eval", "exec"):
        return rules.RC_DYNAMIC_CODE, Severity.critical, f"calls {name}()"
    if name in ("compile", "__import__", "breakpoint") or name in CODE_SINKS:
        return rules.RC_DYNAMIC_CODE, Severity.high, f"calls {name}()"
    if _OS_PROCESS.match(name) or (root in PROCESS_MODULES and "." in name) or name.startswith(
        ("asyncio.create_subprocess", "asyncio.subprocess.", "platform.popen")
    ):
        return rules.RC_PROCESS, Severity.critical, f"calls {name}()"
    if root in NETWORK_MODULES and "." in name:
        return rules.RC_NETWORK, Severity.high, f"calls {name}()"
    if name.startswith(("huggingface_hub.", "transformers.utils.hub.")) and (
        "download" in last or last in ("HfApi", "hf_hub_url", "cached_file", "upload_file")
    ):
        return rules.RC_NETWORK, Severity.high, f"downloads with {name}()"
    if name.startswith(("torch.hub.", "torch.ops.load_library", "torch.classes.load_library",
                        "torch.utils.cpp_extension.")) and last not in ("get_dir", "list", "help"):
        return rules.RC_DYNAMIC_CODE, Severity.critical, f"loads native or hub code: {name}()"
    if name.startswith(("importlib.import_module", "importlib.reload", "importlib.machinery.",
                        "importlib.util.spec_from", "importlib.util.module_from_spec",
                        "importlib.__import__", "importlib.abc.")) or (
        root in DYNAMIC_MODULES and "." in name
    ):
        return rules.RC_DYNAMIC_CODE, Severity.high, f"loads or runs code dynamically: {name}()"
    if name in ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe",
                "inspect.currentframe", "inspect.stack", "inspect.getouterframes"):
        return rules.RC_DYNAMIC_CODE, Severity.high, f"reaches live objects or frames: {name}()"
    if name.startswith(("sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.path_hooks",
                        "sys.meta_path", "site.", "sysconfig.get_path")):
        return rules.RC_DYNAMIC_CODE, Severity.high, f"changes how Python imports or runs: {name}()"
    if HF_TOKEN_NAMES.search(last) and root in ("huggingface_hub", "transformers") or root in (
        "keyring", "netrc"
    ):
        return rules.RC_CREDENTIALS, Severity.high, f"reads a credential: {name}()"
    if name.startswith("transformers.dynamic_module_utils."):
        return rules.RC_NESTED_REMOTE_CODE, Severity.high, f"loads another repo's code: {name}"
    if name.startswith(_PATCHERS):
        return rules.RC_MONKEY_PATCH, Severity.high, f"changes how other code loads or runs: {name}"
    if name in _UNPICKLERS:
        return rules.RC_DYNAMIC_CODE, Severity.high, f"unpickles or constructs objects: {name}"
    if name.startswith("concurrent.futures.ProcessPool") or name.startswith(
        ("asyncio.open_connection", "asyncio.start_server", "asyncio.open_unix_connection",
         "asyncio.start_unix_server")
    ):
        kind = rules.RC_PROCESS if "Process" in name else rules.RC_NETWORK
        return kind, Severity.high, f"calls {name}()"
    if last in DECODERS and (root in _DECODER_MODULES or last == "fromhex"):
        return rules.RC_ENCODED_BLOB, Severity.low, f"decodes data with {name}()"
    if (root == "os" and last in _OS_WRITE) or (root == "shutil" and last in _SHUTIL_WRITE):
        return rules.RC_FS_WRITE, Severity.high, f"changes the file system: {name}()"
    if last in _PATH_WRITE:
        return rules.RC_FS_WRITE, Severity.high, f"changes the file system: .{last}()"
    return None


def dangerous_attribute(attr: str) -> bool:
    """Whether an attribute name, wherever it is looked up, names a capability (used when the
    object is unknown: `operator.methodcaller("system")`, `getattr(x, "__globals__")`)."""
    if attr in INTROSPECTION or attr in _PATH_WRITE:
        return True
    candidates = (attr, *(f"{m}.{attr}" for m in ("os", "subprocess", "shutil", "pickle",
                                                  "importlib", "socket", "marshal")))
    return any((hit := action(c)) is not None and hit[1] >= Severity.high for c in candidates)


def is_decoder(name: str) -> bool:
    """Whether the resolved call `name` decodes base64/hex/compressed data."""
    hit = action(name)
    return hit is not None and hit[0] is rules.RC_ENCODED_BLOB
