"""A CPU model of one mbarrier object, following the PTX ISA's semantics (sm_90).

An mbarrier tracks, for its current phase, a pending arrival count and a signed transaction
(tx) count in bytes. A phase completes when both reach zero; the phase parity then flips and the
pending count resets to the expected arrival count. Bytes may complete before the matching
expect-tx (the tx count goes transiently negative): that is legal, and routine with multicast,
where another CTA's copy can land in this CTA's shared memory before this CTA declares it.

Pure Python: no cutlass, torch or DSL import.
"""

from __future__ import annotations

MAX_ARRIVALS = (1 << 20) - 1  # PTX: mbarrier.init count is 1..2^20-1
TX_COUNT_LIMIT = (1 << 20) - 1  # PTX: tx-count stays within -(2^20-1)..(2^20-1)


class MBarrierError(RuntimeError):
    """An operation the hardware would not survive: undefined behaviour in PTX terms."""


class MBarrier:
    """One mbarrier: `MBarrier(1)` is the seed's barrier (one arrival per phase, by the elected thread)."""

    def __init__(self, expected_arrivals: int) -> None:
        if not 1 <= expected_arrivals <= MAX_ARRIVALS:
            raise MBarrierError(
                f"expected arrival count {expected_arrivals} is outside 1..{MAX_ARRIVALS} (PTX mbarrier.init)"
            )
        self.expected_arrivals = expected_arrivals
        self.pending_arrivals = expected_arrivals
        self.tx_count = 0
        self.completed_phases = 0  # phases completed since init; the current phase has this index

    @property
    def phase(self) -> int:
        """Parity (0 or 1) of the current, not yet completed, phase."""
        return self.completed_phases & 1

    def arrive(self, count: int = 1) -> int:
        """Arrive `count` times on the current phase; return that phase's parity (PTX's state token)."""
        if not 1 <= count <= MAX_ARRIVALS:
            raise MBarrierError(f"arrive count {count} is outside 1..{MAX_ARRIVALS}")
        if count > self.pending_arrivals:
            raise MBarrierError(
                f"arrive({count}) on a phase with {self.pending_arrivals} pending arrival(s): "
                "more arrivals than the phase expects (undefined behaviour)"
            )
        parity = self.phase
        self.pending_arrivals -= count
        self._maybe_complete()
        return parity

    def expect_tx(self, nbytes: int) -> None:
        """Raise the current phase's tx count by `nbytes` (mbarrier.expect_tx)."""
        self._change_tx(nbytes, "expect_tx")

    def arrive_expect_tx(self, nbytes: int) -> int:
        """expect_tx(nbytes) then arrive() as one operation (mbarrier.arrive.expect_tx)."""
        self._check_tx_operand(nbytes, "arrive_expect_tx")
        if self.pending_arrivals < 1:
            raise MBarrierError(
                "arrive_expect_tx on a phase with 0 pending arrivals: more arrivals than the phase expects"
            )
        self._change_tx(nbytes, "arrive_expect_tx")
        return self.arrive()

    def complete_tx(self, nbytes: int) -> None:
        """Lower the tx count by `nbytes`: what the TMA unit does as a copy's bytes land."""
        self._change_tx(-nbytes, "complete_tx", operand=nbytes)

    def try_wait(self, parity: int) -> bool:
        """PTX try_wait.parity: True once the phase with `parity` has completed, i.e. when the current
        phase's parity differs. Right after init (phase 0 running) try_wait(1) is already True."""
        if parity not in (0, 1):
            raise MBarrierError(f"wait parity {parity} is not 0 or 1")
        return self.phase != parity

    def __repr__(self) -> str:
        return (
            f"MBarrier(expected_arrivals={self.expected_arrivals}, pending_arrivals={self.pending_arrivals}, "
            f"tx_count={self.tx_count}, phase={self.phase}, completed_phases={self.completed_phases})"
        )

    # -- internals ---------------------------------------------------------------------------------
    @staticmethod
    def _check_tx_operand(nbytes: int, what: str) -> None:
        if not 0 <= nbytes <= TX_COUNT_LIMIT:
            raise MBarrierError(f"{what}({nbytes}): the byte count must be 0..{TX_COUNT_LIMIT}")

    def _change_tx(self, delta: int, what: str, operand: int | None = None) -> None:
        self._check_tx_operand(delta if operand is None else operand, what)
        new_count = self.tx_count + delta
        if not -TX_COUNT_LIMIT <= new_count <= TX_COUNT_LIMIT:
            raise MBarrierError(
                f"{what}({abs(delta)}) takes the tx count from {self.tx_count} to {new_count}, outside "
                f"the range -{TX_COUNT_LIMIT}..{TX_COUNT_LIMIT} PTX allows"
            )
        self.tx_count = new_count
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.pending_arrivals == 0 and self.tx_count == 0:
            self.completed_phases += 1
            self.pending_arrivals = self.expected_arrivals
