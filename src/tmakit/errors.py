"""The error types tmakit raises: configurations TMA cannot serve, calls torch's own op refused,
and a bounded wait that ran out on the GPU."""


class TmaConfigError(ValueError):
    """A configuration TMA (or tmakit) cannot serve, raised before anything compiles or launches.

    The message names the offending value and the rule it breaks, e.g.
    "global stride of dim 0 is 1554 bytes; TMA needs a multiple of 16".
    """


class TorchOpError(TmaConfigError, RuntimeError):
    """A call tmakit handed to torch's own op, which refused it (its message quoted). Both a
    `TmaConfigError` and the `RuntimeError` torch raises, so `except RuntimeError` written for
    torch's op catches it too. Like every refusal, raised before anything is written."""


class TmaHangError(RuntimeError):
    """A bounded barrier wait ran out on the GPU (the hang guard): the message names the block,
    stage, parity and expected bytes of the wait that never completed."""
