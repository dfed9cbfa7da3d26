"""Remote code: one crafted case per bypass or false-alarm class, each with a benign twin.

The bad case must get its rule at or above `medium`; the twin (the legitimate shape real model
code has) must get nothing at or above `medium`.
"""

from __future__ import annotations

import pytest

from dflash_guard.scan.code.remote_code import check_source
from dflash_guard.severity import Severity

# class -> (rule, bad source, benign twin)
CASES = {
    "alias and re-binding": (
        "DG-RC-PROCESS",
        "import os as _\nf = _.popen\ndef run():\n    f('id')\n",
        "import os as _\nf = _.path.join\ndef run():\n    f('a', 'b')\n",
    ),
    "star import": (
        "DG-RC-PROCESS",
        "from os import *\ndef run():\n    system('id')\n",
        "from torch.nn import *\ndef run():\n    Linear(2, 2)\n",
    ),
    "sys.modules lookup": (
        "DG-RC-PROCESS",
        "import sys\ndef run():\n    sys.modules['os'].system('id')\n",
        "import sys\ndef run():\n    return sys.version_info >= (3, 10)\n",
    ),
    "__builtins__ lookup": (
        "DG-RC-DYNAMIC-CODE",
        "def run(s):\n    __builtins__['eval'](s)\n",
        "def run(xs):\n    return sorted(xs, key=len)\n",
    ),
    "globals()/vars() lookup": (
        "DG-RC-DYNAMIC-CODE",
        "def run(s):\n    return vars()['__builtins__'], globals()[s]\n",
        "def run():\n    return globals()['run']\n",
    ),
    "getattr with a constant name": (
        "DG-RC-PROCESS",
        "import os\ndef run():\n    getattr(os, 'system')('id')\n",
        "import os\ndef run():\n    return getattr(os, 'sep')\n",
    ),
    "getattr with a computed name": (
        "DG-RC-DYNAMIC-CODE",
        "import os\ndef run(name):\n    getattr(os, name)('id')\n",
        "import torch, operator\ndef run(config, op):\n"
        "    return getattr(torch, config.torch_dtype), getattr(operator, op)\n",
    ),
    "getattr over a constant list": (
        "DG-RC-DYNAMIC-CODE",
        "import os\ndef run(names):\n    for n in names:\n        getattr(os, n)()\n",
        "import torch.nn.functional as F\ndef run():\n    for n in ('gelu', 'silu'):\n"
        "        getattr(F, n)\n",
    ),
    "__import__ / import_module of a constant": (
        "DG-RC-PROCESS",
        "import importlib\ndef run():\n    importlib.import_module('subprocess').run(['id'])\n",
        "import importlib.util\ndef run():\n"
        "    return importlib.util.find_spec('einops') is None\n",
    ),
    "dangerous callable passed as a value": (
        "DG-RC-PROCESS",
        "import os, threading\ndef run():\n    threading.Thread(target=os.system, args=('id',))\n",
        "import os, threading\ndef run(f):\n    threading.Thread(target=f, args=(os.sep,))\n",
    ),
    "decorator at import time": (
        "DG-RC-IMPORT-TIME-SIDE-EFFECT",
        "import os\n@os.system\ndef run():\n    pass\n",
        "import functools\n@functools.lru_cache\ndef run():\n    pass\n",
    ),
    "__init_subclass__ hook": (
        "DG-RC-IMPORT-TIME-SIDE-EFFECT",
        "import os\nclass A:\n    def __init_subclass__(cls):\n        os.system('id')\n",
        "class A:\n    def __init_subclass__(cls):\n        cls.registry = {}\n",
    ),
    "metaclass hook": (
        "DG-RC-IMPORT-TIME-SIDE-EFFECT",
        "import os\nclass M(type):\n    def __new__(m, *a):\n        os.system('id')\n",
        "class M(type):\n    def __new__(m, *a):\n        return super().__new__(m, *a)\n",
    ),
    "runpy": (
        "DG-RC-DYNAMIC-CODE",
        "import runpy\ndef run():\n    runpy.run_path('x.py')\n",
        "import math\ndef run():\n    return math.pi\n",
    ),
    "pkgutil": (
        "DG-RC-DYNAMIC-CODE",
        "import pkgutil\ndef run():\n    pkgutil.resolve_name('os:system')('id')\n",
        "import pathlib\ndef run():\n    return pathlib.Path(__file__).parent\n",
    ),
    "asyncio subprocess": (
        "DG-RC-PROCESS",
        "import asyncio\nasync def run():\n    await asyncio.create_subprocess_shell('id')\n",
        "import asyncio\nasync def run():\n    await asyncio.sleep(0)\n",
    ),
    "torch.hub": (
        "DG-RC-DYNAMIC-CODE",
        "import torch\ndef run():\n    return torch.hub.load('evil/repo', 'm')\n",
        "import torch\ndef run(x):\n    return torch.nn.functional.silu(x)\n",
    ),
    "torch.ops.load_library": (
        "DG-RC-DYNAMIC-CODE",
        "import torch\ndef run():\n    torch.ops.load_library('k.so')\n",
        "import torch\ndef run(x):\n    return torch.ops.aten.add(x, x)\n",
    ),
    "cpp_extension load_inline": (
        "DG-RC-DYNAMIC-CODE",
        "from torch.utils.cpp_extension import load_inline\ndef run():\n"
        "    load_inline('m', cpp_sources='')\n",
        "from torch.utils.checkpoint import checkpoint\ndef run(f, x):\n"
        "    return checkpoint(f, x)\n",
    ),
    "torch.load that unpickles": (
        "DG-RC-DYNAMIC-CODE",
        "import torch\ndef run(p):\n    return torch.load(p, weights_only=False)\n",
        "import torch\ndef run(p):\n    return torch.load(p, map_location='cpu')\n",
    ),
    "write to a .pth file": (
        "DG-RC-FS-WRITE",
        "def run():\n    open('/usr/lib/python3/site-packages/x.pth', 'w').write('import os')\n",
        "import torch\ndef run(model):\n    torch.save(model.state_dict(), 'model.pth')\n",
    ),
    "monkey-patching": (
        "DG-RC-MONKEY-PATCH",
        "import torch\ndef run(f):\n    setattr(torch, 'load', f)\n",
        "import torch\ndef run(module, f):\n    setattr(module, 'forward', f)\n",
    ),
    "assignment into a module": (
        "DG-RC-MONKEY-PATCH",
        "import transformers\ndef run(f):\n    transformers.PreTrainedModel.from_pretrained = f\n",
        "import transformers\ndef run(self, f):\n    self.from_pretrained = f\n",
    ),
    "second trust_remote_code": (
        "DG-RC-NESTED-REMOTE-CODE",
        "from transformers import AutoModel\ndef run():\n"
        "    AutoModel.from_pretrained('x/y', trust_remote_code=True)\n",
        # (a literal repository id would be another capability: connect, another repository)
        "from transformers import AutoModel\ndef run(path):\n"
        "    AutoModel.from_pretrained(path, trust_remote_code=False)\n",
    ),
    "custom_pipelines": (
        "DG-RC-NESTED-REMOTE-CODE",
        "def run(load):\n    load(**{'custom_pipelines': {'p': 'org/repo'}})\n",
        "def run(load):\n    load(**{'pipelines': {}})\n",
    ),
    "token helper": (
        "DG-RC-CREDENTIALS",
        "from huggingface_hub import get_token\ndef run():\n    return get_token()\n",
        "from huggingface_hub import constants\ndef run():\n    return constants.HF_HUB_CACHE\n",
    ),
    "os.environ of a credential": (
        "DG-RC-CREDENTIALS",
        "import os\ndef run():\n    return os.environ.get('HF_TOKEN')\n",
        "import os\ndef run():\n"
        "    return os.environ.get('LOCAL_RANK', '0'), 'WORLD_SIZE' in os.environ\n",
    ),
    "string merely mentioning HF_TOKEN": (
        "DG-RC-CREDENTIALS",
        "import os\ndef run():\n    return os.environ\n",
        "def run():\n    raise ValueError('set HF_TOKEN to download gated weights')\n",
    ),
    "eval of a literal": (
        "DG-RC-PROCESS",
        "def run():\n    eval(\"__import__('os').system('id')\")\n",
        "def run():\n    return eval('1 + 2')\n",
    ),
    "decoded payload run as code": (
        "DG-RC-ENCODED-BLOB",
        "import base64, pickle\ndef run(s):\n    return pickle.loads(base64.b64decode(s))\n",
        "import base64\ndef load_tiktoken_bpe(lines):\n"
        "    return {base64.b64decode(t): int(r) for t, r in (l.split() for l in lines)}\n",
    ),
    "writes on a load path vs save-time writes": (
        "DG-RC-FS-WRITE",
        "import shutil\ndef __init__(self, path):\n    shutil.copyfile(path, self.vocab)\n",
        "import shutil\ndef save_vocabulary(self, save_directory):\n"
        "    shutil.copyfile(self.vocab_file, save_directory)\n"
        "    with open(save_directory + '/v', 'wb') as f:\n        f.write(b'')\n",
    ),
}


def _at_least_medium(source: str) -> set[str]:
    findings = check_source(source.encode(), "x.py")
    return {f.rule_id for f in findings if f.severity >= Severity.medium}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_case_is_caught(case: str) -> None:
    rule, bad, _ = CASES[case]
    assert rule in _at_least_medium(bad)


@pytest.mark.parametrize("case", sorted(CASES))
def test_benign_twin_stays_quiet(case: str) -> None:
    _, _, twin = CASES[case]
    assert _at_least_medium(twin) == set()


def test_an_unfamiliar_import_is_information_not_a_capability() -> None:
    """Severity comes from what code does, never from a name the list does not know (z-lab's
    drafter imports `datasets`, Jamba its optional `mamba_ssm`, OLMo its own package)."""
    from dflash_guard.scan.code.remote_code import check_source

    source = b"import datasets\nfrom mamba_ssm import selective_scan_fn\nimport hf_olmo\n"
    findings = check_source(source, "modeling.py")
    assert {(f.rule_id, f.severity.name) for f in findings} == {("DG-RC-UNUSUAL-IMPORT", "low")}
