"""Mutated answer streams fed to setpoint's client and to h11's: never laxer, never different.

The property-based half of ``test_http_differential.py``: answers of the corpus that both
clients read (valid ones), with bytes flipped, cut, repeated or inserted (or any bytes at
all), each followed by the probe answer and read in random pieces. Setpoint must read each
request's answer exactly as h11 does, or give no answer where h11 gives one (stricter: the
corpus names why for each class); an answer h11 refuses, or one read differently (another
status, header, body or boundary), fails. SETPOINT_FUZZ_EXAMPLES sets the number of
examples (small in CI; ``make fuzz`` runs thousands).
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.mutations import mutated
from tests.unit.client._http_drive import compare, h11_reads, setpoint_reads
from tests.unit.client.http_answer_corpus import CASES, PROBE

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "300"))

GOOD = [c.answer for c in CASES if c.stricter is None and not c.eof and len(c.answer) < 2000]
"""Answers both clients read, small enough to mutate quickly."""


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """A good answer, mutated (or any bytes at all)."""
    return mutated(draw, GOOD)


@settings(max_examples=EXAMPLES, deadline=None)
@given(answer=streams(), piece=st.integers(1, 64), eof=st.booleans())
def test_setpoint_is_never_laxer_than_h11(answer: bytes, piece: int, eof: bool) -> None:
    """Whatever the server sends, setpoint reads what h11 reads, or refuses it."""
    answers = [answer] if eof else [answer, PROBE]
    ours, _ = setpoint_reads(answers, eof=eof, piece=piece)
    compare(ours, h11_reads(answers, eof=eof))
