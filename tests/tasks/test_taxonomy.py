"""Failure taxonomy: the primary label is the earliest failed gate (M, E, G, A, T); the others are kept."""

from __future__ import annotations

import pytest

from tasks.taxonomy import count_primary, failure_labels


@pytest.mark.parametrize(("facts", "labels"), [
    ({}, []),                                                              # resolved
    ({"measured": False}, ["M"]),                                          # no sealed measurement
    ({"harness_valid": False}, ["E"]),                                     # harness_invalid
    ({"candidate_succeeded": False, "graders_passed": False}, ["E", "G"]),  # candidate_failure, grader said no too
    ({"graders_passed": False}, ["G"]),                                    # grader_failure
    ({"judges_passed": False}, ["G"]),                                     # judge_failure
    ({"audit_clean": False}, ["A"]),                                       # receipt does not verify
    ({"graders_passed": False, "audit_clean": False}, ["G", "A"]),
    ({"measured": False, "harness_valid": False, "judges_passed": False, "audit_clean": False}, ["M", "E", "G", "A"]),
])
def test_labels_follow_gate_order(facts: dict[str, bool], labels: list[str]) -> None:
    assert failure_labels(**facts) == labels


def test_counts_use_primary_labels_only_and_list_every_label() -> None:
    assert count_primary([[], ["E", "G"], ["G"], ["G", "A"], ["M"]]) == {"M": 1, "E": 1, "G": 2, "A": 0, "T": 0}
