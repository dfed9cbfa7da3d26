"""flax's msgpack checkpoint writer, reproduced from flax/serialization.py (flax cannot be
installed here): `msgpack_serialize` packs the state dict with `_msgpack_ext_pack`, which turns
a numpy array into `ExtType(1, _ndarray_to_bytes(arr))`, a numpy scalar into `ExtType(3, ...)`
of the same (a 0-d array) and a complex into `ExtType(2, packb((real, imag)))`, where
`_ndarray_to_bytes` is `packb((arr.shape, arr.dtype.name, arr.tobytes("C")), use_bin_type=True)`.
"""

from __future__ import annotations

import msgpack
import numpy as np


def _ndarray_to_bytes(arr: np.ndarray) -> bytes:
    return msgpack.packb((arr.shape, arr.dtype.name, arr.tobytes("C")), use_bin_type=True)


def _ext_pack(x: object) -> object:
    if isinstance(x, np.ndarray):
        return msgpack.ExtType(1, _ndarray_to_bytes(x))
    if isinstance(x, np.generic):
        return msgpack.ExtType(3, _ndarray_to_bytes(np.asarray(x)))
    if isinstance(x, complex):
        return msgpack.ExtType(2, msgpack.packb((x.real, x.imag)))
    return x


def flax_serialize(state: dict) -> bytes:
    """The bytes `flax.serialization.msgpack_serialize(state)` writes (arrays under flax's
    chunk size)."""
    return msgpack.packb(state, default=_ext_pack, strict_types=True)
