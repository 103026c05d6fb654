"""The mbarrier model against the PTX rules it encodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tmakit.model.mbarrier import MAX_ARRIVALS, TX_COUNT_LIMIT, MBarrier, MBarrierError


def test_fresh_barrier_is_in_phase_zero():
    bar = MBarrier(1)
    assert (bar.phase, bar.pending_arrivals, bar.tx_count) == (0, 1, 0)
    assert not bar.try_wait(0)  # phase 0 is running
    assert bar.try_wait(1)  # the phase "before" phase 0 counts as completed: producers rely on it


def test_seed_phase_arrive_expect_then_bytes_land():
    bar = MBarrier(1)
    bar.arrive_expect_tx(32768)
    assert (bar.pending_arrivals, bar.tx_count, bar.phase) == (0, 32768, 0)
    assert not bar.try_wait(0)
    bar.complete_tx(16384)
    assert not bar.try_wait(0)  # half the bytes: still waiting
    bar.complete_tx(16384)
    assert bar.try_wait(0) and bar.phase == 1 and bar.pending_arrivals == 1
    assert not bar.try_wait(1)


def test_arrivals_alone_complete_a_phase_without_transactions():
    bar = MBarrier(3)
    bar.arrive()
    bar.arrive(count=1)
    assert bar.phase == 0
    assert bar.arrive() == 0  # returns the parity of the phase it arrived on
    assert bar.phase == 1 and bar.pending_arrivals == 3


def test_bytes_without_arrival_do_not_complete():
    bar = MBarrier(1)
    bar.expect_tx(64)
    bar.complete_tx(64)
    assert bar.tx_count == 0 and bar.phase == 0  # the arrival is still pending
    bar.arrive()
    assert bar.phase == 1


def test_bytes_may_land_before_they_are_expected():
    # multicast: another CTA's slice lands here before this CTA declares the tile
    bar = MBarrier(1)
    bar.complete_tx(4096)
    assert bar.tx_count == -4096 and bar.phase == 0
    bar.arrive_expect_tx(8192)
    assert bar.tx_count == 4096 and bar.phase == 0
    bar.complete_tx(4096)
    assert bar.phase == 1 and bar.tx_count == 0


def test_early_bytes_then_exact_expect_completes_at_once():
    bar = MBarrier(1)
    bar.complete_tx(100)
    bar.arrive_expect_tx(100)  # expect brings tx to 0, then the arrival completes the phase
    assert bar.phase == 1


@pytest.mark.parametrize("count", [0, MAX_ARRIVALS + 1, -1])
def test_expected_arrivals_out_of_range(count):
    with pytest.raises(MBarrierError, match=str(count)):
        MBarrier(count)


def test_expected_arrivals_at_the_limits():
    assert MBarrier(1).pending_arrivals == 1
    assert MBarrier(MAX_ARRIVALS).pending_arrivals == MAX_ARRIVALS


def test_more_arrivals_than_pending():
    bar = MBarrier(2)
    bar.arrive()
    with pytest.raises(MBarrierError, match="more arrivals"):
        bar.arrive(count=2)
    bar.arrive_expect_tx(16)  # the second arrival is fine
    with pytest.raises(MBarrierError, match="more arrivals"):
        bar.arrive_expect_tx(16)  # phase still waiting for bytes: no arrival left


def test_arrive_expect_tx_refused_leaves_state_alone():
    bar = MBarrier(1)
    bar.arrive_expect_tx(16)
    with pytest.raises(MBarrierError):
        bar.arrive_expect_tx(16)
    assert bar.tx_count == 16 and bar.pending_arrivals == 0


def test_tx_count_overflow():
    bar = MBarrier(1)
    bar.expect_tx(TX_COUNT_LIMIT)
    with pytest.raises(MBarrierError, match="outside the range"):
        bar.expect_tx(1)


def test_tx_count_underflow():
    bar = MBarrier(1)
    bar.complete_tx(TX_COUNT_LIMIT)  # the most negative tx count PTX allows
    assert bar.tx_count == -TX_COUNT_LIMIT
    with pytest.raises(MBarrierError, match="outside the range"):
        bar.complete_tx(1)


@pytest.mark.parametrize("nbytes", [-1, TX_COUNT_LIMIT + 1])
def test_tx_operand_out_of_range(nbytes):
    with pytest.raises(MBarrierError, match=str(nbytes)):
        MBarrier(1).expect_tx(nbytes)
    with pytest.raises(MBarrierError, match=str(nbytes)):
        MBarrier(1).complete_tx(nbytes)


def test_bad_parity_and_arrive_count():
    with pytest.raises(MBarrierError):
        MBarrier(1).try_wait(2)
    with pytest.raises(MBarrierError):
        MBarrier(4).arrive(count=0)


@settings(max_examples=300, deadline=None, database=None)
@given(
    arrivals=st.integers(1, 6),
    chunks=st.lists(st.integers(1, 4096), min_size=0, max_size=8),
    phases=st.integers(1, 4),
    data=st.data(),
)
def test_any_order_completes_exactly_at_the_last_operation(arrivals, chunks, phases, data):
    """Arrivals (one carrying the expect-tx) and byte landings in any order, bytes possibly
    first: the phase completes on the last operation and not before, phase after phase."""
    bar = MBarrier(arrivals)
    total = sum(chunks)
    for phase_index in range(phases):
        operations = [("arrive_expect", total)] + [("arrive", 1)] * (arrivals - 1)
        operations += [("land", n) for n in chunks]
        order = data.draw(st.permutations(operations))
        for step, (what, amount) in enumerate(order):
            assert bar.phase == phase_index & 1
            if what == "arrive_expect":
                bar.arrive_expect_tx(amount)
            elif what == "arrive":
                bar.arrive()
            else:
                bar.complete_tx(amount)
            finished = step == len(order) - 1
            assert bar.try_wait(phase_index & 1) == finished
        assert bar.completed_phases == phase_index + 1
        assert (bar.pending_arrivals, bar.tx_count) == (arrivals, 0)
