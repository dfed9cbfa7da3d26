"""Which globals a pickle may import: the state-dict allowlist, harmless classes, known danger.

`classify_global` turns one (module, name) into a severity: None for what a torch state dict or a
numpy array needs, low for a harmless class the policy decides on (training arguments, enums,
tensor subclasses), critical for a module or callable known to give code execution, high for
everything else (an allowlist, so an unknown gadget is never silent).
"""

from __future__ import annotations

from dflash_guard.severity import Severity

_TORCH_STORAGES = [
    "Float",
    "Double",
    "Half",
    "BFloat16",
    "Long",
    "Int",
    "Short",
    "Char",
    "Byte",
    "Bool",
    "ComplexFloat",
    "ComplexDouble",
    "QUInt8",
    "QInt8",
    "QInt32",
    "QUInt4x2",
    "QUInt2x4",
    "Untyped",
]
_TORCH_DTYPES = [
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex128",
    "float",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "uint16",
    "uint32",
    "uint64",
    "half",
    "double",
    "long",
    "int",
    "short",
    "qint8",
    "quint8",
    "qint32",
    "quint4x2",
    "quint2x4",
]

# Everything a torch state dict or a numpy array legitimately needs to import.
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("collections", "OrderedDict"),
        ("torch._utils", "_rebuild_tensor"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_tensor_v3"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch._utils", "_rebuild_parameter_with_state"),
        ("torch._utils", "_rebuild_qtensor"),  # quantized (int8) state dicts
        ("torch._utils", "_rebuild_meta_tensor_no_storage"),
        ("torch", "per_tensor_affine"),
        ("torch", "per_channel_affine"),
        ("torch", "per_channel_affine_float_qparams"),
        ("torch", "per_tensor_symmetric"),
        ("torch", "per_channel_symmetric"),
        ("torch", "Size"),
        ("torch", "device"),
        ("torch", "UntypedStorage"),
        ("torch.storage", "UntypedStorage"),  # how float8 storages are saved
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("builtins", "bytearray"),
        ("__builtin__", "set"),
        ("__builtin__", "frozenset"),
        ("_codecs", "encode"),  # how protocols 0-2 spell a bytes object
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
    }
    | {("torch", f"{kind}Storage") for kind in _TORCH_STORAGES}
    | {("torch", dtype) for dtype in _TORCH_DTYPES}
)

# Harmless classes a pickle instantiates or whose members it names (training arguments saved as
# `training_args.bin`, their enums, tensor subclasses): not a state dict, so reported low, and
# whether such files may be loaded at all is the policy's `pickle_allowed` decision.
CLASS_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("transformers.training_args", "TrainingArguments"),
        ("transformers.training_args", "OptimizerNames"),
        ("transformers.training_args_seq2seq", "Seq2SeqTrainingArguments"),
        ("transformers.trainer_utils", "IntervalStrategy"),
        ("transformers.trainer_utils", "SaveStrategy"),
        ("transformers.trainer_utils", "EvaluationStrategy"),
        ("transformers.trainer_utils", "SchedulerType"),
        ("transformers.trainer_utils", "HubStrategy"),
        ("transformers.trainer_utils", "FSDPOption"),
        ("transformers.trainer_utils", "ShardedDDPOption"),
        ("transformers.trainer_pt_utils", "AcceleratorConfig"),
        ("transformers.debug_utils", "DebugOption"),
        ("transformers.generation.configuration_utils", "GenerationConfig"),
        # joblib's wrapper of a numpy array: its BUILD makes joblib read the raw array bytes
        # that follow (skipped by the stream walker) or, for object arrays, a nested pickle
        ("joblib.numpy_pickle", "NumpyArrayWrapper"),
        ("sklearn.externals.joblib.numpy_pickle", "NumpyArrayWrapper"),
        # TRL's trainers save their config (a TrainingArguments subclass) as training_args.bin
        ("trl.trainer.sft_config", "SFTConfig"),
        ("trl.trainer.dpo_config", "DPOConfig"),
        ("trl.trainer.dpo_config", "FDivergenceType"),
        ("trl.trainer.grpo_config", "GRPOConfig"),
        ("trl.trainer.reward_config", "RewardConfig"),
        ("trl.trainer.orpo_config", "ORPOConfig"),
        ("trl.trainer.kto_config", "KTOConfig"),
        ("trl.trainer.cpo_config", "CPOConfig"),
        ("trl.trainer.ppo_config", "PPOConfig"),
        ("trl.trainer.gkd_config", "GKDConfig"),
        ("accelerate.utils.dataclasses", "DataLoaderConfiguration"),
        ("accelerate.utils.dataclasses", "DistributedType"),
        ("accelerate.state", "PartialState"),
        ("copyreg", "_reconstructor"),  # protocols 0-1 spelling of "a new instance of class X"
        ("builtins", "object"),
        ("__builtin__", "object"),
        ("torch._tensor", "_rebuild_from_type_v2"),  # tensor subclasses (quantized weights)
        ("torch._utils", "_rebuild_wrapper_subclass"),
        ("torch.nn.parameter", "Parameter"),
    }
)

# Modules whose import alone gives a pickle code execution, process, network or file access.
DANGEROUS_MODULES: frozenset[str] = frozenset(
    [
        "os",
        "posix",
        "nt",
        "subprocess",
        "sys",
        "runpy",
        "importlib",
        "code",
        "codeop",
        "pty",
        "socket",
        "shutil",
        "webbrowser",
        "timeit",
        "cProfile",
        "profile",
        "pydoc",
        "pickle",
        "_pickle",
        "dill",
        "cloudpickle",
        "marshal",
        "ctypes",
        "multiprocessing",
        "asyncio",
        "bdb",
        "pdb",
        "http",
        "urllib",
        "urllib2",
        "urllib3",
        "requests",
        "httpx",
        "httplib",
        "aiohttp",
        "ftplib",
        "smtplib",
        "telnetlib",
        "imaplib",
        "poplib",
        "nntplib",
        "tempfile",
        "types",
        "io",
        "_io",
        "_posixsubprocess",
        "signal",
        "threading",
        "_thread",
        "platform",
        "zipimport",
        "pkgutil",
        "glob",
        "linecache",
    ]
)
DANGEROUS_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        (builtins, name)
        for builtins in ("builtins", "__builtin__")
        for name in (
            [
                "eval",
                "exec",
                "compile",
                "open",
                "getattr",
                "setattr",
                "delattr",
                "__import__",
                "apply",
                "breakpoint",
                "input",
                "globals",
                "locals",
                "vars",
                "execfile",
                "file",
                "reload",
                "help",
            ]
        )
    }
    | {
        ("functools", "partial"),
        ("functools", "reduce"),
        ("_functools", "partial"),
        ("operator", "attrgetter"),
        ("operator", "methodcaller"),
        ("operator", "itemgetter"),
        ("_operator", "attrgetter"),
        ("_operator", "methodcaller"),
        ("numpy.testing._private.utils", "runstring"),
        ("torch", "load"),
        ("torch.serialization", "load"),
        ("logging", "FileHandler"),
    }
)

def classify_global(module: str, name: str) -> Severity | None:
    """None for an allowlisted global, low for a harmless class, critical for a known-dangerous
    one, high otherwise."""
    if (module, name) in ALLOWED_GLOBALS:
        return None
    if (module, name) in CLASS_GLOBALS:
        return Severity.low
    root = module.split(".", 1)[0]
    if (module, name) in DANGEROUS_GLOBALS or root in DANGEROUS_MODULES:
        return Severity.critical
    return Severity.high
