"""The client's answer parsing against h11's, case by case (issue 27).

Every stream of ``http_answer_corpus.CASES`` (valid, edge and hostile answers, each followed
by a probe answer on the same connection) goes to setpoint's client and to h11's client, and
what a caller would observe is compared: each answer's status, headers and body (so where
each answer ends), or that no answer came. Setpoint must read every case as h11 does, or be
stricter (refuse where h11 reads) for the reason the case names; it is never laxer. The
property-based run over mutated streams is ``test_http_differential_fuzz.py``.
"""

from __future__ import annotations

import pytest

from tests.unit.client._http_drive import (
    compare,
    h11_reads,
    setpoint_reads,
    setpoint_reads_at_once,
)
from tests.unit.client.http_answer_corpus import CASES, PROBE, Case


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_answers_are_read_as_h11_reads_them_or_stricter(case: Case) -> None:
    """Same verdicts and boundaries as h11; where setpoint refuses more, the case says why."""
    ours, _ = setpoint_reads(case.answers, eof=case.eof)
    theirs = h11_reads(case.answers, eof=case.eof)
    verdict = compare(ours, theirs)
    if case.stricter is None:
        assert verdict == "same", f"setpoint refuses what h11 reads: {ours} / {theirs}"
    else:
        assert verdict == "stricter", f"marked stricter ({case.stricter}) but reads as h11 does"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@pytest.mark.parametrize("piece", [1, 7])
def test_how_the_bytes_are_split_changes_nothing(case: Case, piece: int) -> None:
    """Reads of one byte or of seven give what one read of each answer gives."""
    whole, _ = setpoint_reads(case.answers, eof=case.eof)
    split, _ = setpoint_reads(case.answers, eof=case.eof, piece=piece)
    assert split == whole


@pytest.mark.parametrize("case", [c for c in CASES if not c.eof], ids=lambda case: case.name)
def test_an_answer_sent_ahead_is_never_read(case: Case) -> None:
    """Answer and probe in one read: the answer is read as when it came alone.

    The probe is never taken for the answer to a request not yet written: bytes after a
    complete answer close its connection.
    """
    alone, _ = setpoint_reads([case.answer])
    together, connection = setpoint_reads_at_once([case.answer, PROBE])
    assert together == alone[0]
    assert not connection.usable


def test_the_corpus_covers_what_the_issue_names() -> None:
    """The classes of issue 27's list each have cases (a guard against a thinned corpus)."""
    names = {case.name for case in CASES}
    for needed in (
        "length-and-chunked",
        "two-equal-lengths",
        "lf-hides-length",
        "cr-in-value",
        "obs-fold",
        "nul-in-name",
        "space-in-name",
        "vt-in-name",
        "chunk-size-overflow",
        "chunk-size-leading-space",
        "chunk-size-trailing-space",
        "chunked-leading-zeros",
        "chunk-extension",
        "trailers",
        "last-chunk-lf",
        "interim-100",
        "to-the-end-1.1",
        "http-1.0-keep-alive",
        "huge-head",
        "no-content-with-body",
        "not-modified-with-body",
    ):
        assert needed in names
