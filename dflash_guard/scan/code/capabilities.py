"""What a call can do: the capability catalog of the remote-code rules, kept as data with where
each entry's behaviour comes from (the library source or documentation that makes the call spawn,
connect, read credentials, write, or load or evaluate code), so a library upgrade that adds such
a helper is a reviewed diff of this table.

An entry's pattern is `PREFIX.LAST`: the resolved dotted name must start at the module path
`PREFIX` (any depth below it) and its last part must match the glob `LAST`; `?.LAST` matches a
method of an object the rules cannot resolve (`api.upload_folder(...)` where `api` is an
`HfApi()`), `*.LAST` a method of any object, resolved or not. Some entries hold only when the
call's arguments say so (`When`): a URL handed to a reader that fetches URLs, a repository id
handed to `from_pretrained`, `pretrained=True`, or only when called (a method name that is also
a plain attribute elsewhere). Arguments are folded first (string pieces, names bound to
literals).
Module-wide capabilities (every function of `subprocess`, `socket`, `pickle`...) are the module
lists in `catalog`; this table holds the helpers of other modules.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import re

from dflash_guard import rules
from dflash_guard.rules import Rule
from dflash_guard.severity import Severity


class Capability(enum.Enum):
    """What a call can do, as the report names it."""

    spawn = "spawn a process"
    connect = "connect to the network"
    credentials = "read credentials"
    write = "write files"
    load_code = "load code or pickles"
    evaluate = "evaluate a string as code"
    dynamic_attribute = "reach attributes by a computed name"

    @property
    def rule(self) -> Rule:
        return _RULES[self]


_RULES = {
    Capability.spawn: rules.RC_PROCESS,
    Capability.connect: rules.RC_NETWORK,
    Capability.credentials: rules.RC_CREDENTIALS,
    Capability.write: rules.RC_FS_WRITE,
    Capability.load_code: rules.RC_DYNAMIC_CODE,
    Capability.evaluate: rules.RC_DYNAMIC_CODE,
    Capability.dynamic_attribute: rules.RC_DYNAMIC_CODE,
}
# How a finding of each rule names its capability (the first words of its message).
RULE_LABELS = {
    rules.RC_PROCESS.id: Capability.spawn.value,
    rules.RC_NETWORK.id: Capability.connect.value,
    rules.RC_CREDENTIALS.id: Capability.credentials.value,
    rules.RC_FS_WRITE.id: Capability.write.value,
    rules.RC_DYNAMIC_CODE.id: "load or run code",
    rules.RC_MONKEY_PATCH.id: "patch other code",
    rules.RC_NESTED_REMOTE_CODE.id: "load another repository's code",
    rules.RC_ENCODED_BLOB.id: "hide a payload",
}


class When(enum.Enum):
    """What else a call needs for the entry to hold."""

    always = "always"
    call = "called (a method name other objects use as an attribute too)"
    url = "a literal URL argument"
    repo_id = "a literal repository id (ORG/NAME) as the first argument"
    pretrained = "pretrained=True, weights=... or download=True"


@dataclasses.dataclass(frozen=True)
class Entry:
    """Calls matching `patterns` have `capabilities` (the first decides the rule)."""

    patterns: tuple[str, ...]
    capabilities: tuple[Capability, ...]
    severity: Severity
    does: str  # what the call does, in words
    source: str  # where that behaviour comes from
    when: When = When.always

    def message(self, name: str) -> str:
        labels = ", ".join(c.value for c in self.capabilities)
        return f"{labels}: {name.replace('?.', '<object>.', 1)}() {self.does}"


S, C, R, W, L, E = (Capability.spawn, Capability.connect, Capability.credentials,
                    Capability.write, Capability.load_code, Capability.evaluate)
HIGH, CRITICAL = Severity.high, Severity.critical

ENTRIES: tuple[Entry, ...] = (
    # -- spawn --------------------------------------------------------------------------------
    Entry(("distutils.spawn.*", "setuptools._distutils.spawn.*", "distutils.ccompiler.*",
           "setuptools.sandbox.run_setup"), (S,), CRITICAL, "runs a command",
          "CPython Lib/distutils/spawn.py spawn() (subprocess); setuptools/sandbox.py run_setup "
          "execs a setup.py"),
    Entry(("pydoc.pipepager", "pydoc.tempfilepager", "pydoc.pager", "pydoc.getpager"), (S,),
          CRITICAL, "runs a pager command",
          "CPython Lib/pydoc.py pipepager/tempfilepager: subprocess.Popen(cmd, shell=True)"),
    Entry(("?.subprocess_exec", "?.subprocess_shell"), (S,), CRITICAL,
          "runs a command from an event loop",
          "CPython Lib/asyncio/base_events.py BaseEventLoop.subprocess_exec/_shell"),
    Entry(("numpy.f2py.compile", "numpy.f2py.run_main", "numpy.distutils.*"), (S,), CRITICAL,
          "runs the compiler", "numpy/f2py/f2py2e.py: builds with a compiler in a subprocess"),
    Entry(("webbrowser.*",), (S, C), CRITICAL, "starts a browser on a URL",
          "CPython Lib/webbrowser.py: BackgroundBrowser.open runs subprocess.Popen"),
    Entry(("os.startfile", "os.posix_spawn", "os.posix_spawnp"), (S,), CRITICAL,
          "starts a program", "CPython Doc/library/os.rst (Process Management)"),
    Entry(("concurrent.futures.process.*",), (S,), CRITICAL, "starts worker processes",
          "CPython Lib/concurrent/futures/process.py ProcessPoolExecutor"),
    Entry(("uuid._get_command_stdout", "platform._syscmd_*", "venv.create", "venv.EnvBuilder",
           "spacy.cli.download"), (S,), CRITICAL, "runs a command",
          "CPython Lib/uuid.py _get_command_stdout(command, *args) and Lib/platform.py "
          "_syscmd_* (subprocess), Lib/venv/__init__.py (runs ensurepip); spacy/cli/download.py "
          "(pip in a subprocess)"),
    Entry(("?.system", "?.popen", "?.Popen", "?.check_output", "?.check_call", "?.getoutput",
           "?.getstatusoutput", "?.spawnv*", "?.spawnl*", "?.execv*", "?.execl*"), (S,),
          CRITICAL, "runs a command (the name of os's and subprocess's, on an object the rules "
          "cannot resolve)", "CPython Lib/os.py, Lib/subprocess.py", When.call),
    # -- connect ------------------------------------------------------------------------------
    Entry(("torch.hub.load", "torch.hub.list", "torch.hub.help"), (L, C), CRITICAL,
          "downloads a GitHub repository and imports its hubconf.py",
          "torch/hub.py load/list/help: _get_cache_or_reload then _import_module(hubconf)"),
    Entry(("torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.*"), (L, C), CRITICAL,
          "downloads a file and torch.load()s it (weights_only=False by default)",
          "torch/hub.py load_state_dict_from_url(weights_only=False); torch/utils/model_zoo.py "
          "re-exports it as load_url"),
    Entry(("torch.hub.download_url_to_file", "?.download_url_to_file"), (C,), HIGH,
          "downloads a URL", "torch/hub.py download_url_to_file: urllib.request.urlopen"),
    Entry(("torch.distributed.init_process_group", "torch.distributed.TCPStore",
           "torch.distributed.rpc.*", "torch.distributed.elastic.*",
           "torch.distributed.rendezvous"), (C,), HIGH,
          "opens a rendezvous with other hosts",
          "torch/distributed/distributed_c10d.py init_process_group (init_method tcp:// or "
          "env://), torch/distributed/rpc"),
    Entry(("huggingface_hub.*download*", "huggingface_hub.upload_*", "huggingface_hub.create_*",
           "huggingface_hub.delete_*", "huggingface_hub.HfApi", "huggingface_hub.HfFileSystem",
           "huggingface_hub.*InferenceClient", "huggingface_hub.*login", "huggingface_hub.logout",
           "huggingface_hub.get_session", "huggingface_hub.http_backoff",
           "huggingface_hub.*_info", "huggingface_hub.list_*", "huggingface_hub.*_exists",
           "huggingface_hub.Repository", "huggingface_hub.get_hf_file_metadata",
           "huggingface_hub.hf_hub_url", "huggingface_hub.cached_download"), (C,), HIGH,
          "talks to the Hub",
          "huggingface_hub/hf_api.py (HfApi methods and their module-level aliases), "
          "file_download.py, _snapshot_download.py, utils/_http.py get_session"),
    Entry(("?.upload_file", "?.upload_folder", "?.upload_large_folder", "?.create_commit",
           "?.create_repo", "?.snapshot_download", "?.hf_hub_download", "?.push_to_hub"),
          (C,), HIGH, "talks to the Hub (uploads or downloads)",
          "huggingface_hub/hf_api.py HfApi.upload_*/create_*; transformers/utils/hub.py "
          "PushToHubMixin.push_to_hub"),
    Entry(("transformers.utils.cached_file", "transformers.utils.cached_files",
           "transformers.utils.hub.cached_file*", "transformers.utils.hub.get_file_from_repo",
           "transformers.utils.hub.download_url", "transformers.utils.hub.has_file",
           "transformers.utils.download_url",
           "transformers.utils.has_file", "transformers.utils.get_file_from_repo",
           "transformers.pipeline", "transformers.pipelines.pipeline",
           "transformers.cached_path", "transformers.get_from_cache",
           "transformers.hf_bucket_url", "transformers.get_checkpoint_shard_files"), (C,), HIGH,
          "fetches files of a repository from the Hub",
          "transformers/utils/hub.py cached_file/cached_files (hf_hub_download); "
          "transformers/pipelines/__init__.py pipeline() downloads a task's default model"),
    Entry(("*.from_pretrained", "sentence_transformers.SentenceTransformer",
           "sentence_transformers.CrossEncoder"), (C,), HIGH,
          "loads another repository from the Hub",
          "transformers/modeling_utils.py, configuration_utils.py, tokenization_utils_base.py "
          "from_pretrained: an id that is not a local folder goes to utils/hub.py cached_file",
          When.repo_id),
    Entry(("logging.handlers.HTTPHandler", "logging.handlers.SocketHandler",
           "logging.handlers.DatagramHandler", "logging.handlers.SysLogHandler",
           "logging.handlers.SMTPHandler"), (C,), HIGH, "ships log records to another host",
          "CPython Lib/logging/handlers.py (emit sends each record over HTTP, TCP, UDP, syslog "
          "or mail)"),
    Entry(("logging.config.listen",), (C, E), CRITICAL,
          "listens on a socket and applies the configurations it receives",
          "CPython Lib/logging/config.py listen(): received text goes to fileConfig/dictConfig"),
    Entry(("numpy.DataSource", "numpy.lib.npyio.DataSource", "numpy.lib._datasource.*"), (C,),
          HIGH, "opens URLs", "numpy/lib/_datasource.py DataSource.open: urlopen for a URL"),
    Entry(("numpy.loadtxt", "numpy.genfromtxt", "numpy.fromregex", "pandas.read_*",
           "PIL.Image.open", "*.open", "*.load", "*.get"),
          (C,), HIGH, "fetches a URL",
          "numpy/lib/_npyio_impl.py loadtxt/genfromtxt open through _datasource (URLs "
          "included); pandas/io/common.py get_handle (urlopen for URLs)", When.url),
    Entry(("tiktoken.get_encoding", "tiktoken.encoding_for_model", "tiktoken_ext.*"), (C,),
          HIGH, "downloads an encoding",
          "tiktoken/registry.py get_encoding -> tiktoken_ext/openai_public.py "
          "load_tiktoken_bpe(URL) -> tiktoken/load.py read_file (requests.get)"),
    Entry(("datasets.load_dataset", "datasets.load_dataset_builder"), (C, L), HIGH,
          "downloads a dataset (and may run its loading script)",
          "datasets/load.py load_dataset: Hub download, dataset_module_factory imports scripts"),
    Entry(("timm.create_model", "torchvision.models.*", "open_clip.create_model*",
           "torchvision.datasets.*"), (C,), HIGH, "downloads pretrained weights or a data set",
          "timm/models/_builder.py load_pretrained (Hub or URL); torchvision/models/_api.py "
          "WeightsEnum.get_state_dict (load_state_dict_from_url); torchvision/datasets/utils.py "
          "download_url (download=True)", When.pretrained),
    Entry(("nltk.download", "evaluate.load", "evaluate.load_metric"), (C, L), HIGH,
          "downloads data (evaluate: and runs the metric's script)",
          "nltk/downloader.py Downloader.download; evaluate/loading.py load "
          "(evaluation_module_factory imports the downloaded script)"),
    Entry(("wsgiref.simple_server.*",), (C,), HIGH, "serves on a socket",
          "CPython Lib/wsgiref/simple_server.py make_server (socketserver)"),
    Entry(("?.urlopen", "?.urlretrieve"), (C,), HIGH, "fetches a URL",
          "CPython Lib/urllib/request.py (OpenerDirector.open, urlretrieve)", When.call),
    Entry(("?.create_connection", "?.open_connection", "?.sock_connect",
           "?.create_datagram_endpoint", "?.sendall", "?.sendto"), (C,), HIGH,
          "opens or uses a network connection",
          "CPython Lib/asyncio/base_events.py, Lib/socket.py (loop and socket methods)"),
    # -- read credentials ---------------------------------------------------------------------
    Entry(("huggingface_hub.HfFolder.*", "huggingface_hub.*get_token*",
           "huggingface_hub.*token_path*", "transformers.utils.hub.HfFolder.*",
           "huggingface_hub.get_stored_tokens", "huggingface_hub.*whoami"), (R,), HIGH,
          "reads the Hub token",
          "huggingface_hub/utils/_auth.py get_token (HF_TOKEN, then ~/.cache/huggingface/token)"),
    Entry(("getpass.getpass", "spwd.*", "browser_cookie3.*", "secretstorage.*"), (R,), HIGH,
          "reads a secret", "CPython Doc/library/getpass.rst, spwd.rst"),
    # -- write outside the folder -------------------------------------------------------------
    # (savers judged by their path are `catalog.SAVERS`; these write wherever they are told)
    # -- load code or pickles -----------------------------------------------------------------
    Entry(("torch.jit.load", "torch.package.*"), (L,), HIGH,
          "loads a serialized program (TorchScript, or a package that unpickles its modules)",
          "torch/jit/_serialization.py load; torch/package/package_importer.py PackageImporter"),
    Entry(("numpy.ctypeslib.load_library",), (L,), CRITICAL, "loads a native library",
          "numpy/ctypeslib.py load_library -> ctypes.cdll"),
    Entry(("pydoc.locate", "pydoc.importfile", "pydoc.safeimport", "pkgutil.resolve_name"),
          (Capability.dynamic_attribute, L), HIGH,
          "imports a module and looks an object up by a dotted string",
          "CPython Lib/pydoc.py locate/importfile; Lib/pkgutil.py resolve_name"),
    Entry(("pkg_resources.load_entry_point", "pkg_resources.iter_entry_points",
           "importlib.metadata.entry_points", "importlib_metadata.entry_points"), (L,), HIGH,
          "imports what an installed package's entry point names",
          "CPython Lib/importlib/metadata/__init__.py EntryPoint.load (import_module)"),
    Entry(("hydra.utils.*", "hydra._internal.utils.*"), (L,), HIGH,
          "imports and calls what a config names",
          "hydra/_internal/instantiate/_instantiate2.py instantiate -> _locate"),
    Entry(("logging.config.dictConfig", "logging.config.fileConfig"), (L,), HIGH,
          "builds handlers from data: fileConfig eval()s their arguments, dictConfig imports "
          "'()' factories by name",
          "CPython Lib/logging/config.py _install_handlers (eval), BaseConfigurator.resolve"),
    Entry(("keras.models.load_model", "tensorflow.keras.models.load_model",
           "keras.saving.load_model"), (L,), HIGH, "loads a model whose layers may be code",
          "keras/src/saving/saving_api.py load_model (Lambda layers)"),
    Entry(("pandas.read_hdf", "pandas.HDFStore", "sklearn.externals.joblib.load"), (L,), HIGH,
          "unpickles (object columns of an HDF5 store; joblib)",
          "pandas/io/pytables.py (object data is pickled); sklearn/externals/joblib re-exports "
          "joblib.load"),
    # -- evaluate a string as code ------------------------------------------------------------
    Entry(("timeit.timeit", "timeit.repeat", "timeit.Timer"), (E,), HIGH,
          "compiles and runs its statement string",
          "CPython Lib/timeit.py Timer.__init__: compile + exec of stmt/setup"),
    Entry(("cProfile.run", "cProfile.runctx", "profile.run", "profile.runctx", "pdb.run",
           "pdb.runeval", "pdb.runctx", "?.runctx", "?.runeval", "doctest.run_docstring_examples",
           "doctest.DocTestRunner"), (E,), HIGH, "runs a string as code",
          "CPython Lib/cProfile.py, profile.py, pdb.py, bdb.py run/runctx: exec(cmd)"),
    Entry(("jinja2.Template", "jinja2.Environment", "jinja2.environment.*",
           "jinja2.nativetypes.*"), (E,), HIGH,
          "renders a template outside the sandbox (attribute access reaches Python objects)",
          "jinja2/environment.py Environment (jinja2/sandbox.py is the sandboxed one)"),
    Entry(("pandas.eval", "numexpr.evaluate", "sympy.sympify", "sympy.parse_expr",
           "sympy.parsing.sympy_parser.parse_expr"), (E,), HIGH, "evaluates an expression string",
          "pandas/core/computation/eval.py (engine='python'); sympy/core/sympify.py "
          "(parse_expr: eval); numexpr/necompiler.py stringToExpression (eval)"),
    Entry(("torch.jit.CompilationUnit",), (E,), HIGH, "compiles TorchScript source",
          "torch/jit/_script.py CompilationUnit(src)"),
    Entry(("typing.ForwardRef", "typing._eval_type", "trace.Trace", "bdb.*"), (E,), HIGH,
          "evaluates a string as code",
          "CPython Lib/typing.py ForwardRef._evaluate (eval), Lib/trace.py and Lib/bdb.py run "
          "(exec)"),
)

_URL = re.compile(r"^(https?|ftps?|s3|gs|hf)://", re.IGNORECASE)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _compile(pattern: str) -> tuple[str, re.Pattern[str]]:
    prefix, _, last = pattern.rpartition(".")
    return prefix, re.compile(re.escape(last).replace(r"\*", ".*") + r"\Z")


_COMPILED = tuple((entry, tuple(_compile(p) for p in entry.patterns)) for entry in ENTRIES)


def find(name: str, call: ast.Call | None = None) -> Entry | None:
    """The first entry whose pattern matches the resolved `name` (`?.attr`: an unknown
    receiver's method, matched by `?.` and `*.` patterns) and whose condition the arguments of
    `call` meet (None: no call to judge, so only unconditional entries)."""
    module, _, last = name.rpartition(".")
    for entry, patterns in _COMPILED:
        for prefix, glob in patterns:
            if prefix in ("*", "?"):
                matched = prefix == "*" or module == "?"
            elif module == "?":
                matched = False
            else:
                matched = module == prefix or module.startswith(prefix + ".")
            if matched and glob.match(last) and holds(entry, call):
                return entry
    return None


def holds(entry: Entry, node: ast.Call | None) -> bool:
    """Whether the call `node` meets the entry's condition (None: no call to judge)."""
    if entry.when is When.always:
        return True
    if node is None:
        return False
    if entry.when is When.call:
        return True
    values = [*node.args, *(k.value for k in node.keywords)]
    literals = [v.value for v in values if isinstance(v, ast.Constant)
                and isinstance(v.value, str)]
    if entry.when is When.url:
        return any(_URL.match(text) for text in literals)
    if entry.when is When.repo_id:
        first = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == "pretrained_model_name_or_path"), None)
        text = first.value if isinstance(first, ast.Constant) else None
        return isinstance(text, str) and bool(_REPO_ID.match(text)) and not text.startswith(".")
    for keyword in node.keywords:  # When.pretrained
        value = keyword.value
        if keyword.arg in ("pretrained", "download") and not (
            isinstance(value, ast.Constant) and value.value in (False, None, "")
        ):
            return True
        if keyword.arg == "weights" and not (isinstance(value, ast.Constant)
                                             and value.value is None):
            return True
    return False
