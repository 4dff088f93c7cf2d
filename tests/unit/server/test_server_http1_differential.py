"""setpoint's request parsing against h11's, on a corpus of valid, edge and hostile streams.

Every case of ``http_request_corpus.py`` is fed to setpoint's server connection and to
h11's server side (``_http1_drive.py``), whole and cut into pieces, and the two must handle
the same requests, in the same order, with the same bodies: the same verdicts and the same
message boundaries. Where setpoint refuses more (llhttp's strictness, or a limit of
setpoint's own), the case names the reason, and the test checks that setpoint's requests
are then exactly the ones before the refused one in h11's list; no case may be laxer. The
corpus stays honest both ways: a case marked stricter that in fact agrees fails too.
``test_server_http1_differential_fuzz.py`` runs the same comparison on generated streams.
"""

from __future__ import annotations

import asyncio

import pytest

from setpoint.server._http1 import MAX_HEAD

from ._http1_drive import Observed, h11_serves, pieces_of, setpoint_serves
from .http_request_corpus import CASES, PROBE, UPGRADE, Case


def compare(case: Case, ours: Observed, theirs: Observed) -> None:
    """The corpus rule: the same requests handled, or a documented strict prefix of them."""
    if case.stricter:
        assert ours.served != theirs.served, (
            f"{case.name} is marked stricter but setpoint and h11 agree: drop the reason"
        )
        assert ours.served == theirs.served[: len(ours.served)], (
            f"{case.name}: setpoint handled {ours.served!r}, not a prefix of h11's "
            f"{theirs.served!r}"
        )
        # Only an upgrade request ends the connection without a refusal (UPGRADE).
        assert ours.error or case.stricter == UPGRADE, (
            f"{case.name}: setpoint handled fewer requests without refusing one"
        )
    else:
        assert ours.served == theirs.served, (
            f"{case.name}: setpoint handled {ours.served!r} ({ours.error or 'no refusal'}), "
            f"h11 {theirs.served!r} ({theirs.error or 'no refusal'})"
        )


def check_answers(case: Case, ours: Observed) -> None:
    """An answer per handled request (200), then at most one refusal, never a 500."""
    handled = len(ours.served)
    assert ours.statuses[:handled] == [200] * handled, (case.name, ours.statuses)
    refusals = ours.statuses[handled:]
    assert len(refusals) <= 1, (case.name, ours.statuses)
    assert all(400 <= code < 500 or code in (503, 505) for code in refusals), (
        case.name,
        ours.statuses,
    )


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_setpoint_handles_what_h11_handles(case: Case) -> None:
    """The whole stream in one read: the same requests as h11, or a documented prefix."""
    ours = asyncio.run(setpoint_serves([case.stream]))
    theirs = h11_serves([case.stream])
    compare(case, ours, theirs)
    check_answers(case, ours)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_where_the_stream_is_cut_changes_nothing(case: Case) -> None:
    """The stream one byte at a time (or in 997-byte pieces when long): setpoint handles the
    same requests as from one read, and never one h11 would not handle from these pieces
    (h11 itself may differ: it bounds a head only while the head is incomplete)."""
    stream = case.stream
    step = 1 if len(stream) <= 4096 else 997
    pieces = pieces_of(stream, range(step, len(stream), step))
    whole = asyncio.run(setpoint_serves([stream]))
    cut = asyncio.run(setpoint_serves(pieces))
    assert cut.served == whole.served, (case.name, cut.error, whole.error)
    assert cut.statuses == whole.statuses, case.name
    theirs = h11_serves(pieces).served
    assert cut.served == theirs[: len(cut.served)], (case.name, cut.served, theirs)


def test_the_corpus_covers_the_issue_s_classes() -> None:
    """Each class issue 27 names has cases, and most valid cases end with the probe served."""
    names = " ".join(case.name for case in CASES)
    for word in [
        "cl-and-te",
        "two-lengths",
        "bare-lf",
        "bare-cr",
        "obs-fold",
        "nul-in-header",
        "cr-in-header",
        "lf-in-header",
        "space-in-header",
        "vt-in-header",
        "chunk-size-overflow",
        "chunk-size-leading-space",
        "chunk-size-trailing-space",
        "leading-zeros",
        "chunk-extension",
        "trailer",
        "last-chunk-then-bare-lf",
        "pipelined",
        "http-1.0-keep-alive",
        "huge-head",
        "expect-100-continue",
        "post-without-length",
        "absolute-form",
        "asterisk",
    ]:
        assert word in names, word
    served_probe = [
        case
        for case in CASES
        if (PROBE in case.stream and not case.stricter)
        and asyncio.run(setpoint_serves([case.stream])).served[-1:] == [("GET", "/probe", b"")]
    ]
    assert len(served_probe) >= 40
    assert any(len(case.stream) > MAX_HEAD for case in CASES)
