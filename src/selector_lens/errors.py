"""The one error type for bad input: the CLI prints its message on one line and exits 2."""


class SelectorLensError(ValueError):
    """Bad input (an impossible config, a missing or corrupt file, an index out of range)."""
