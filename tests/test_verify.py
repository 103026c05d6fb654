import numpy as np
import pytest

from tmakit import SEED, LoadConfig, LoadPlan
from tmakit.check import reference


@pytest.fixture(scope="module")
def seed_case():
    plan = LoadPlan(SEED)
    input_bits = reference.make_input_bits(plan)
    return plan, input_bits, reference.expected_output_bits(plan, input_bits)


def test_correct_output_passes(seed_case):
    plan, _, expected = seed_case
    verdict = reference.compare_tiles(plan, expected, expected.copy())
    assert verdict.ok and str(verdict) == "924/924 tiles correct"


def test_one_wrong_element_names_its_tile(seed_case):
    plan, _, expected = seed_case
    found = expected.copy()
    found[64 + 5, 512 + 7] ^= 0x10
    verdict = reference.compare_tiles(plan, expected, found)
    assert not verdict.ok and verdict.tiles_correct == 923
    m = verdict.first_mismatch
    assert (m.row_block, m.column_tile, m.row, m.col) == (1, 2, 69, 519)
    assert m.wrong_elements == 1
    assert "tile (row_block=1, column_tile=2)" in str(verdict)


def test_untouched_poison_is_caught(seed_case):
    plan, _, expected = seed_case
    found = expected.copy()
    found[-64:, -256:] = reference.make_poisoned_output_bits(plan)[-64:, -256:]
    m = reference.compare_tiles(plan, expected, found).first_mismatch
    assert (m.row_block, m.column_tile) == (131, 6)
    assert m.found == 0xFFFF and m.wrong_elements == 64 * 256


@pytest.mark.parametrize("shift", [(1, 0), (-1, 0), (0, 1), (0, -1)])
def test_whole_tile_shifts_never_match(seed_case, shift):
    """Data loaded from a neighbouring tile (what a wrong tile origin gives) is never mistaken
    for the right tile: the hash differs from its shifted self almost everywhere."""
    plan, input_bits, expected = seed_case
    shifted = np.roll(input_bits, (shift[0] * 64, shift[1] * 256), axis=(0, 1))
    verdict = reference.compare_tiles(plan, expected, shifted)
    assert verdict.tiles_correct == 0
    assert np.mean(shifted == input_bits) < 0.001


def test_inputs_never_equal_the_poison():
    for dtype in ("fp16", "fp32", "int8"):
        plan = LoadPlan(LoadConfig((256, 256), dtype, (64, 64)))
        bits = reference.make_input_bits(plan)
        assert not np.any(bits == reference.POISON[plan.config.element.bits])


def test_partial_tiles_expect_zeros_past_the_edge():
    plan = LoadPlan(LoadConfig((100, 776), "fp16", (64, 256)))
    input_bits = reference.make_input_bits(plan)
    expected = reference.expected_output_bits(plan, input_bits)
    assert expected.shape == (128, 1024)
    assert not expected[100:, :].any() and not expected[:, 776:].any()
    np.testing.assert_array_equal(expected[:100, :776], input_bits)
    found = expected.copy()
    found[127, 1023] = 1  # a non-zero where TMA must have zero-filled
    m = reference.compare_tiles(plan, expected, found).first_mismatch
    assert (m.row_block, m.column_tile) == (1, 3)
