"""Exception types. Every error a user can cause is a StreamclustError with one clear line."""


class StreamclustError(Exception):
    """Base class: the CLI prints ``str(err)`` on one line and exits non-zero."""


class DataError(StreamclustError, ValueError):
    """Bad input data: names the file, column or row."""


class ParameterError(StreamclustError, ValueError):
    """Unknown or invalid parameter, raised when an algorithm or run is constructed."""


class ModelError(StreamclustError):
    """A model directory that is missing, incomplete or was tampered with."""


class PluginError(StreamclustError):
    """A plugin that fails to import, or two algorithms with one name."""
