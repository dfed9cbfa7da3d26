"""A reference DFlash draft-verify runner in plain PyTorch (CUDA when present, CPU otherwise).

model.py (Qwen3-style target, KV cache), drafter.py (DFlash v1 drafter), loop.py (greedy
draft-verify decoding; autoregressive = block size 1; fault injection), checkpoint.py (HF folders
read with safetensors only), tokenizer.py (the fixture's byte-level tokenizer), fixtures.py (the
built-in tiny pair).
"""
