"""False alarms issue 24 lists, removed: benign look-alikes stay below the default threshold."""

from __future__ import annotations

from pathlib import Path

from dflash_guard.scan import scan_paths
from dflash_guard.scan.code.remote_code import check_source
from dflash_guard.severity import Severity
from dflash_guard.templates.grammar import check_template


def test_tokenizers_parallelism_is_a_setting_not_a_credential() -> None:
    source = b'import os\nos.environ["TOKENIZERS_PARALLELISM"] = "false"\n'
    source += b'x = os.environ.get("TOKENIZERS_PARALLELISM")\n'
    assert [f for f in check_source(source, "m.py") if f.severity >= Severity.medium] == []
    token = check_source(b'import os\nt = os.environ["HF_TOKEN"]\n', "m.py")
    assert "DG-RC-CREDENTIALS" in {f.rule_id for f in token if f.severity >= Severity.high}


def test_a_lone_underscore_in_replace_is_low() -> None:
    findings = check_template("{{ tool.name|replace('-', '_') }}", "t.jinja")
    assert [(f.rule_id, f.severity) for f in findings] == [("DG-TPL-DUNDER", Severity.low)]


def test_trl_sft_config_in_training_args_is_a_low_class_global(tmp_path: Path) -> None:
    """TRL saves its SFTConfig (a TrainingArguments subclass) as training_args.bin."""
    pickle = (b"\x80\x02ctrl.trainer.sft_config\nSFTConfig\nq\x00)\x81q\x01}q\x02"
              b"X\x0a\x00\x00\x00output_dirq\x03X\x03\x00\x00\x00outq\x04sb.")
    (tmp_path / "training_args.bin").write_bytes(pickle)
    report = scan_paths([tmp_path])
    assert [f for f in report.findings if f.severity >= Severity.medium] == []
    assert report.pickle_files == ["training_args.bin"]  # the policy's pickle_allowed decides


# Shapes real modeling code has that the remote-code rules of this round must leave below high.
_BENIGN_SHAPES = {
    "a setting, not a patch": "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
                              "torch._dynamo.config.cache_size_limit = 64\n",
    "frozen dataclass field": "class C:\n    def set(self, v):\n"
                              "        object.__setattr__(self, 'x', v)\n",
    "config to_dict": "import copy\nclass C:\n    def to_dict(self):\n"
                      "        return copy.deepcopy(self.__dict__)\n",
    "tokenizers link in a docstring": '"""See [tokenizers](https://github.com/huggingface/'
                                      'tokenizers)."""\n',
    "urllib.parse": "from urllib.parse import urlparse\ndef is_url(s):\n"
                    "    return urlparse(s).scheme in ('http', 'https')\n",
    "a local named like a module": "def f(codes):\n    code = []\n    code.append(codes)\n"
                                   "    return code\n",
    "save inside the folder": "import torch, os\nclass M:\n    def save_pretrained(self, d):\n"
                              "        torch.save(self.state_dict(), os.path.join(d, 'w.bin'))\n",
    "str(type(x).__mro__)": "def is_module(cls):\n    return 'Module' in str(cls.__mro__)\n",
    "sys.stderr": "import sys\ndef log(m):\n    print(m, file=sys.stderr)\n",
    "os.environ membership": "import os\nFLAG = 'X' in os.environ\n",
}


def test_benign_shapes_stay_below_high() -> None:
    for label, source in _BENIGN_SHAPES.items():
        loud = [f for f in check_source(source.encode(), "m.py") if f.severity >= Severity.high]
        assert loud == [], (label, loud)
