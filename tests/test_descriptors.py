"""Tensor maps written on the device (`model.descriptors`): the write, release, signal, wait,
acquire, use protocol, and a report for each use a piece of it does not cover."""

from __future__ import annotations

import pytest

from tmakit.model.descriptors import FINDINGS, DescriptorEvent, replay_descriptors, update_schedule


def test_the_whole_protocol_covers_every_use():
    assert replay_descriptors(update_schedule(100)) == []


@pytest.mark.parametrize(
    ("skip", "finding"),
    [
        ("write", "no-write"),
        ("release", "missing-release"),
        ("signal", "no-synchronization"),
        ("wait", "no-synchronization"),
        ("acquire", "missing-acquire"),
    ],
)
def test_each_piece_left_out_is_reported_at_every_use(skip, finding):
    findings = replay_descriptors(update_schedule(4, skip=skip))
    assert [f.kind for f in findings] == [finding] * 4
    assert [f.descriptor for f in findings] == [0, 1, 2, 3]
    assert FINDINGS[finding] in findings[0].describe()


def events(spec: str) -> list[DescriptorEvent]:
    """ "w:write u:use:1" -> thread w writes map 0, thread u uses map 1."""
    parts = [token.split(":") for token in spec.split()]
    return [DescriptorEvent(p[0], p[1], int(p[2]) if len(p) > 2 else 0) for p in parts]


PROTOCOL = "w:write w:release w:signal u:wait u:acquire u:use"


@pytest.mark.parametrize(
    ("spec", "finding"),
    [
        ("w:write w:signal w:release u:wait u:acquire u:use", "missing-release"),  # released too late
        ("w:write w:release w:signal u:acquire u:wait u:use", "missing-acquire"),  # acquired too early
        ("w:write x:release w:signal u:wait u:acquire u:use", "missing-release"),  # not the writer's
        (f"{PROTOCOL} w:write u:use", "no-synchronization"),  # written again after its use
        ("w:write w:release w:signal:1 u:wait:1 u:acquire u:use", "no-synchronization"),  # another map's
    ],
    ids=["release-late", "acquire-early", "other-releaser", "rewritten", "other-map"],
)
def test_a_piece_out_of_order_is_as_missing(spec, finding):
    assert replay_descriptors(events(PROTOCOL)) == []
    assert [f.kind for f in replay_descriptors(events(spec))] == [finding]


def test_one_thread_writing_and_using_needs_both_fences_but_no_signal():
    assert replay_descriptors(events("t:write t:release t:acquire t:use")) == []
    assert [f.kind for f in replay_descriptors(events("t:write t:acquire t:use"))] == ["missing-release"]
