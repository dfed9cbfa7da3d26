"""A reference DFlash draft-verify runner in plain PyTorch (CUDA when present, CPU otherwise).

model.py (Qwen3 and Llama targets and the one preallocated KV cache), config.py (their parsed
`config.json`; what is unsupported), rope.py (default and llama3 RoPE), drafter.py (DFlash v1
drafter), drafter2.py (DFlash 2: block convolutions and a candidate selector), load.py (loading a
target and its drafter from HF folders), loop.py (the decode loop, greedy or sampled;
autoregressive = block size 1), generate.py (its entry point), sampling.py (exact speculative
rejection sampling for temperature > 0), faults.py (the bugs `--inject` plants), plant.py (how
each is planted, outside the loop), compat.py (drafter-vs-target compatibility, torch-free),
errors.py (`RunnerError`), cuda_graphs.py (decode, verify and draft steps captured as CUDA
graphs), oracle.py (a drafter that proposes the target's own continuation: an upper bound),
checkpoint.py (HF folders read with safetensors only), tokenizer.py (the fixture's byte-level
tokenizer), fixtures.py (the built-in tiny pair), serve.py (an OpenAI-compatible server),
gguf_reader.py (the one bounded GGUF reader the scanner and the diff share),
logprobs.py (the target's logprobs at every position of a given output), weight_files.py (which
safetensors files of a folder are decoded; an ambiguous weight set is refused).
See docs/kernels-ref.md.

Stands alone (imports nothing from the guard that uses it); this file, faults.py, compat.py,
gguf_reader.py, weight_files.py and errors.py import no torch, so a scanner or CLI can use them
cheaply.
"""
