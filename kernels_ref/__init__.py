"""A reference DFlash draft-verify runner in plain PyTorch (CUDA when present, CPU otherwise).

model.py (Qwen3-style target, growing and static KV caches), drafter.py (DFlash v1 drafter),
loop.py (greedy draft-verify decoding; autoregressive = block size 1; fault injection),
sampling.py (exact speculative rejection sampling for temperature > 0), cuda_graphs.py (decode,
verify and draft steps captured as CUDA graphs), oracle.py (a drafter that proposes the target's
own continuation: an upper bound), checkpoint.py (HF folders read with safetensors only),
tokenizer.py (the fixture's byte-level tokenizer), fixtures.py (the built-in tiny pair),
serve.py (an OpenAI-compatible server over the runner).
"""
