"""The one error kernels_ref raises for an input it cannot use (model folder, config, option)."""


class RunnerError(ValueError):
    """A missing, unreadable, malformed or unsupported input; the message names file and field."""
