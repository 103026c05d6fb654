"""The one error type tmakit raises for configurations TMA cannot serve."""


class TmaConfigError(ValueError):
    """A configuration TMA (or tmakit) cannot serve, raised before anything compiles or launches.

    The message names the offending value and the rule it breaks, e.g.
    "global stride of dim 0 is 1554 bytes; TMA needs a multiple of 16".
    """


class TmaHangError(RuntimeError):
    """A bounded barrier wait ran out on the GPU (the hang guard): the message names the block,
    stage, parity and expected bytes of the wait that never completed."""
