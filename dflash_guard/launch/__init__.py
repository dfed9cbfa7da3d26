"""`dflash-guard launch`: the serve command of an engine, loading exactly what a lock pins.

`plan` resolves the lock, the policy and the folders given into what the engine loads (each
local folder verified against the lock first, Hub repos pinned to their locked commits, remote
code trusted only when the policy approves it by digest) or refuses; `engines` writes that as
each engine's own command line; `check` lints someone else's command line against the same lock
and policy, as scan findings.
"""
