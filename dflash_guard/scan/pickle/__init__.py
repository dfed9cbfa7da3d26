"""Does it unpickle: `scan` (a pickle file, a zip or tar of them, a torch/joblib/numpy
checkpoint), `stream` (the opcode walk, never `pickle.load`), `globals` (which imported names are
allowed), `payloads` (serialized objects hidden in strings), `containers` (zip, tar and
compressed streams) and `modelscan_pass` (modelscan's second opinion)."""
