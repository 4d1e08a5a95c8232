"""What stops a model from loading. (A bad setting is :class:`specdec.options.ConfigError`, beside
the fields it checks.)"""


class ModelLoadError(RuntimeError):
    """A model cannot be loaded or paired; the message says which one and what to do."""
