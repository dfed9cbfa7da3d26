"""`dflash-guard launch`: the serve command of an engine, loading exactly what a lock pins.

`plan` resolves the lock, the policy and the folders given into what the engine loads (every
folder verified against the lock first, a Hub artifact's HF-cache snapshot included, and given
to the engine by path; remote code trusted only when the policy approves it by digest) or the
refusal (an `Outcome`); `engines` writes that as each engine's own command line; `run` makes
the two one `LaunchReport`, from a verified approval record when given one; `engine_identity`
proves the program `launch --approval` runs is the locked engine; `passthrough` says which
engine arguments pass after `--` and which variables `--exec` clears (llama.cpp's options from
`llamacpp_flags`, generated from the pinned tree); `check` lints someone else's command line
against the same lock and policy, as scan findings, reading a vLLM command with the pinned
vLLM's own parser (`vllm_parser`); `confine` is what `--exec` lets the engine touch, a
Landlock ruleset (`landlock`) it runs under.
"""
