"""Does it parse whole: the weights formats a file must parse completely as (`safetensors`,
`gguf`, `onnx`, `flax_msgpack`, and the small binary formats of `binformats`)."""
