"""A reference DFlash draft-verify runner in plain PyTorch (CUDA when present, CPU otherwise)."""
