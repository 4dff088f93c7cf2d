"""Answer byte streams for the client's differential test against h11 (issue 27).

Each :class:`Case` is one server's answer to a GET, valid, edge or hostile, followed (unless
the answer ends with the stream) by :data:`PROBE`, the answer to a second request on the same
connection. ``test_http_differential.py`` feeds both to setpoint's client and to h11's and
compares what a caller observes: every answer (status, headers, body), every refusal, and
where each answer ends. A case where setpoint is stricter than h11 says why in ``stricter``;
no case may be laxer.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass

PROBE = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nprobe"
"""The second answer on the connection: the one a hidden boundary would swallow or forge."""

OK = b"HTTP/1.1 200 OK\r\n"
CHUNKED = OK + b"Transfer-Encoding: chunked\r\n\r\n"

# The reasons setpoint is stricter, each named once.
TWO_FRAMINGS = (
    "Content-Length with Transfer-Encoding: RFC 9112 6.3 calls it a possible smuggling "
    "attempt; h11 lets chunked win, llhttp refuses rather than choose"
)
TWO_LENGTHS = (
    "more than one Content-Length, even equal: llhttp refuses (a proxy may have joined two "
    "answers' headers); h11 folds equal values into one"
)
BARE_LF = (
    "a bare LF as a line end: RFC 9112 2.2 lets a recipient accept it and h11 does; llhttp "
    "refuses it, so no header can hide inside another's line (issue 27, finding 8)"
)
OBS_FOLD = (
    "a folded header line (obs-fold): RFC 9112 5.2 deprecates it and h11 joins it to the "
    "line before; llhttp refuses it"
)
CHUNK_SPACE = (
    "whitespace after a chunk size: h11 skips it, llhttp refuses it (a chunk size is hex "
    "digits, then an extension or CRLF)"
)
LAST_CHUNK_LF = (
    "'0\\r\\n\\n' (the last chunk ended by a bare LF): h11 ends the body there; llhttp reads "
    "the LF as the start of a trailer and refuses it, so the bytes after it cannot be "
    "taken as trailers or as the next answer (finding 7's request hiding, on the client)"
)
VERSION = (
    "HTTP versions other than 1.0 and 1.1: h11 reads any HTTP/x.y status line as HTTP/1.x; "
    "setpoint speaks HTTP/1.1 only and refuses the rest (llhttp refuses 1.2, setpoint "
    "refuses 2.0 itself)"
)
READ_AHEAD = (
    "bytes after a complete answer, before the next request was written: h11 keeps them "
    "and reads them as the next answer; setpoint closes the connection, so an answer can "
    "never be taken for the one to a later request"
)
DEL = (
    "DEL (0x7f) in a header value or the reason phrase: RFC 9110 5.5 and RFC 9112 4 allow "
    "VCHAR, SP, HTAB and obs-text (0x80-0xff) only; h11 lets DEL through, llhttp refuses it "
    "in values and setpoint refuses every control character but tab in the reason phrase"
)
HUGE_HEAD = (
    "a head of more than 64 KiB: h11 bounds a head only while it is incomplete (one that "
    "arrives whole in one read is taken at any size); setpoint bounds every head"
)
INTERIM_HEADS = (
    "interim answers whose heads add up to more than 64 KiB: h11 bounds each head, setpoint "
    "bounds all the heads of one answer together"
)
CODING = "a content coding setpoint cannot decode (br): h11 does not decode bodies at all"


@dataclass(frozen=True)
class Case:
    """One answer stream; ``eof``: the server closes after it (no probe follows)."""

    name: str
    answer: bytes
    eof: bool = False
    stricter: str | None = None

    @property
    def answers(self) -> list[bytes]:
        """The answers to the two requests on the connection (one when ``eof``)."""
        return [self.answer] if self.eof else [self.answer, PROBE]


def _header_bytes(size: int) -> bytes:
    return b"X-Big: " + b"a" * size + b"\r\n"


_GZIPPED = gzip.compress(b'{"kind":"List"}', mtime=0)

CASES: list[Case] = [
    # -- valid answers ----------------------------------------------------------------
    Case("length", OK + b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"),
    Case("length-zero", OK + b"Content-Length: 0\r\n\r\n"),
    Case("length-leading-zeros", OK + b"Content-Length: 002\r\n\r\nhi"),
    Case("length-trailing-space", OK + b"Content-Length: 2 \r\n\r\nhi"),
    Case("chunked", CHUNKED + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
    Case("chunked-capitalised", OK + b"Transfer-Encoding: Chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"),
    Case("chunked-uppercase-hex", CHUNKED + b"A\r\n0123456789\r\n0\r\n\r\n"),
    Case("chunked-leading-zeros", CHUNKED + b"0003\r\nabc\r\n000\r\n\r\n"),
    Case("chunk-extension", CHUNKED + b"3;name=value\r\nabc\r\n0;last\r\n\r\n"),
    Case("chunk-extension-quoted", CHUNKED + b'3;a="b c"\r\nabc\r\n0\r\n\r\n'),
    Case("trailers", CHUNKED + b"3\r\nabc\r\n0\r\nX-Trailer: t\r\nY: u\r\n\r\n"),
    Case("chunked-crlf-in-data", CHUNKED + b"4\r\n\r\n\r\n\r\n0\r\n\r\n"),
    Case("no-content", b"HTTP/1.1 204 No Content\r\n\r\n"),
    Case("no-content-with-length", b"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n"),
    Case(
        "not-modified-chunked", b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n"
    ),
    Case("interim-100", b"HTTP/1.1 100 Continue\r\n\r\n" + OK + b"Content-Length: 2\r\n\r\nhi"),
    Case(
        "interim-103-then-100",
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
        + OK
        + b"Content-Length: 2\r\n\r\nhi",
    ),
    Case("interim-with-length", b"HTTP/1.1 100 Continue\r\nContent-Length: 3\r\n\r\n" + PROBE),
    Case("to-the-end-1.1", OK + b"\r\nuntil the end", eof=True),
    Case("to-the-end-1.0", b"HTTP/1.0 200 OK\r\n\r\nuntil the end", eof=True),
    Case("http-1.0-length", b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi"),
    Case(
        "http-1.0-keep-alive",
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi",
    ),
    Case("connection-close", OK + b"Connection: close\r\nContent-Length: 2\r\n\r\nhi"),
    Case("connection-tokens", OK + b"Connection: keep-alive, close\r\nContent-Length: 2\r\n\r\nhi"),
    Case("no-reason", b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nhi"),
    Case("empty-reason", b"HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nhi"),
    Case("reason-tab-and-obs-text", b"HTTP/1.1 200 O\tK \xff\r\nContent-Length: 2\r\n\r\nhi"),
    Case("status-599", b"HTTP/1.1 599 Odd\r\nContent-Length: 2\r\n\r\nhi"),
    Case("status-999", b"HTTP/1.1 999 Odd\r\nContent-Length: 2\r\n\r\nhi"),
    Case("value-whitespace", OK + b"X:\t a b \t\r\nY:\r\nContent-Length: 2\r\n\r\nhi"),
    Case("value-obs-text", OK + b"X: caf\xe9\r\nContent-Length: 2\r\n\r\nhi"),
    Case("repeated-header", OK + b"Warning: 1\r\nWarning: 2, 3\r\nContent-Length: 2\r\n\r\nhi"),
    Case(
        "many-headers",
        OK
        + b"".join(b"X-%d: %d\r\n" % (i, i) for i in range(200))
        + b"Content-Length: 2\r\n\r\nhi",
    ),
    Case("large-head", OK + _header_bytes(60_000) + b"Content-Length: 2\r\n\r\nhi"),
    Case(
        "gzip",
        OK + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(_GZIPPED) + _GZIPPED,
    ),
    # -- framing that could be read two ways ------------------------------------------------
    Case(
        "length-and-chunked",
        OK + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        stricter=TWO_FRAMINGS,
    ),
    Case(
        "chunked-and-length",
        OK + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        stricter=TWO_FRAMINGS,
    ),
    Case(
        "two-equal-lengths",
        OK + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\nhi",
        stricter=TWO_LENGTHS,
    ),
    Case("two-different-lengths", OK + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\nhi"),
    Case("length-list", OK + b"Content-Length: 2, 2\r\n\r\nhi", stricter=TWO_LENGTHS),
    Case("length-negative", OK + b"Content-Length: -2\r\n\r\nhi"),
    Case("length-plus", OK + b"Content-Length: +2\r\n\r\nhi"),
    Case("length-hex", OK + b"Content-Length: 0x2\r\n\r\nhi"),
    Case("length-overflow", OK + b"Content-Length: 99999999999999999999999\r\n\r\nhi"),
    Case("length-short-then-close", OK + b"Content-Length: 10\r\n\r\nhi", eof=True),
    Case("transfer-gzip", OK + b"Transfer-Encoding: gzip\r\n\r\nhi", eof=True),
    Case("transfer-chunked-twice", OK + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
    Case(
        "transfer-two-lines",
        OK + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    Case(
        "transfer-identity-chunked", OK + b"Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n"
    ),
    Case(
        "http-1.0-chunked",
        b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
        eof=True,
    ),
    # -- bare LF and bare CR ---------------------------------------------------------------------
    Case("lf-status-line", b"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nhi", stricter=BARE_LF),
    Case("lf-hides-length", OK + b"X: a\nContent-Length: 3\r\n\r\nabc", stricter=BARE_LF),
    Case("lf-ends-head", OK + b"Content-Length: 2\r\n\nhi", stricter=BARE_LF),
    Case("lf-everywhere", b"HTTP/1.1 200 OK\nContent-Length: 2\n\nhi", stricter=BARE_LF),
    Case("cr-status-line", b"HTTP/1.1 200 OK\rContent-Length: 2\r\n\r\nhi"),
    Case("cr-in-value", OK + b"X: a\rContent-Length: 2\r\n\r\nhi"),
    Case("cr-in-name", OK + b"X\r: a\r\nContent-Length: 2\r\n\r\nhi"),
    Case("lf-chunk-size", CHUNKED + b"3\nabc\r\n0\r\n\r\n"),
    Case("lf-after-chunk-data", CHUNKED + b"3\r\nabc\n0\r\n\r\n"),
    Case("cr-after-chunk-data", CHUNKED + b"3\r\nabc\r0\r\n\r\n"),
    Case("lf-in-chunk-extension", CHUNKED + b"3;a=b\nc\r\nabc\r\n0\r\n\r\n"),
    Case("lf-trailer", CHUNKED + b"3\r\nabc\r\n0\r\nX: y\n\r\n", stricter=BARE_LF),
    Case("last-chunk-lf", CHUNKED + b"3\r\nabc\r\n0\r\n\n", stricter=LAST_CHUNK_LF),
    Case("obs-fold-first", OK + b" folded\r\nContent-Length: 2\r\n\r\nhi"),
    Case("obs-fold", OK + b"X: a\r\n b\r\nContent-Length: 2\r\n\r\nhi", stricter=OBS_FOLD),
    Case("obs-fold-tab", OK + b"X: a\r\n\tb\r\nContent-Length: 2\r\n\r\nhi", stricter=OBS_FOLD),
    # -- control characters and separators in names and values -----------------------------------
    Case("nul-in-name", OK + b"X\x00Y: 1\r\nContent-Length: 2\r\n\r\nhi"),
    Case("space-in-name", OK + b"X Y: 1\r\nContent-Length: 2\r\n\r\nhi"),
    Case("vt-in-name", OK + b"X\x0bY: 1\r\nContent-Length: 2\r\n\r\nhi"),
    Case("del-in-name", OK + b"X\x7fY: 1\r\nContent-Length: 2\r\n\r\nhi"),
    Case("non-ascii-name", OK + b"X\xe9: 1\r\nContent-Length: 2\r\n\r\nhi"),
    Case("space-before-colon", OK + b"Content-Length : 2\r\n\r\nhi"),
    Case("tab-before-colon", OK + b"Content-Length\t: 2\r\n\r\nhi"),
    Case("empty-name", OK + b": 1\r\nContent-Length: 2\r\n\r\nhi"),
    Case("no-colon", OK + b"X 1\r\nContent-Length: 2\r\n\r\nhi"),
    Case("nul-in-value", OK + b"X: a\x00b\r\nContent-Length: 2\r\n\r\nhi"),
    Case("vt-in-value", OK + b"X: a\x0bb\r\nContent-Length: 2\r\n\r\nhi"),
    Case("ff-in-value", OK + b"X: a\x0cb\r\nContent-Length: 2\r\n\r\nhi"),
    Case("del-in-value", OK + b"X: a\x7fb\r\nContent-Length: 2\r\n\r\nhi", stricter=DEL),
    Case("nul-in-reason", b"HTTP/1.1 200 O\x00K\r\nContent-Length: 2\r\n\r\nhi"),
    Case("del-in-reason", b"HTTP/1.1 200 O\x7fK\r\nContent-Length: 2\r\n\r\nhi", stricter=DEL),
    # -- status lines ---------------------------------------------------------------------------
    Case("http-2.0", b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", stricter=VERSION),
    Case("http-1.2", b"HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nhi", stricter=VERSION),
    Case("http-2", b"HTTP/2 200\r\n\r\n"),
    Case("lower-case-http", b"http/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"),
    Case("two-digit-status", b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nhi"),
    Case("four-digit-status", b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nhi"),
    Case("status-000", b"HTTP/1.1 000 OK\r\nContent-Length: 2\r\n\r\nhi"),
    Case("status-099", b"HTTP/1.1 099 OK\r\nContent-Length: 2\r\n\r\nhi"),
    Case("status-non-ascii-digit", "HTTP/1.1 ¹00 OK\r\n\r\n".encode("latin-1")),
    Case("two-spaces", b"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nhi"),
    Case("no-space-after-status", b"HTTP/1.1 200OK\r\nContent-Length: 2\r\n\r\nhi"),
    Case("empty-line-first", b"\r\n" + OK + b"Content-Length: 2\r\n\r\nhi"),
    Case(
        "switching-protocols",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    ),
    Case(
        "empty-line-after-interim",
        b"HTTP/1.1 100 Continue\r\n\r\n\r\n" + OK + b"Content-Length: 2\r\n\r\nhi",
    ),
    Case(
        "interim-heads-over-limit",
        b"HTTP/1.1 100 Continue\r\n"
        + _header_bytes(40_000)
        + b"\r\nHTTP/1.1 100 Continue\r\n"
        + _header_bytes(40_000)
        + b"\r\n"
        + OK
        + b"Content-Length: 2\r\n\r\nhi",
        stricter=INTERIM_HEADS,
    ),
    # -- chunks -----------------------------------------------------------------------------------
    Case("chunk-size-overflow", CHUNKED + b"ffffffffffffffffff\r\nabc\r\n0\r\n\r\n"),
    Case("chunk-size-leading-space", CHUNKED + b" 3\r\nabc\r\n0\r\n\r\n"),
    Case("chunk-size-trailing-space", CHUNKED + b"3 \r\nabc\r\n0\r\n\r\n", stricter=CHUNK_SPACE),
    Case("chunk-size-trailing-tab", CHUNKED + b"3\t\r\nabc\r\n0\r\n\r\n", stricter=CHUNK_SPACE),
    Case("chunk-size-0x", CHUNKED + b"0x3\r\nabc\r\n0\r\n\r\n"),
    Case("chunk-size-negative", CHUNKED + b"-3\r\nabc\r\n0\r\n\r\n"),
    Case("chunk-size-empty", CHUNKED + b"\r\nabc\r\n0\r\n\r\n"),
    Case("chunk-longer-than-size", CHUNKED + b"3\r\nabcd\r\n0\r\n\r\n"),
    Case("chunk-without-crlf", CHUNKED + b"3\r\nabc0\r\n\r\n"),
    Case("trailer-garbage", CHUNKED + b"3\r\nabc\r\n0\r\ngarbage\r\n\r\n"),
    Case("trailer-space-before-colon", CHUNKED + b"3\r\nabc\r\n0\r\nX : y\r\n\r\n"),
    Case("chunked-cut-by-close", CHUNKED + b"3\r\nab", eof=True),
    # -- answers that do not stop where they should ---------------------------------------
    Case("no-content-with-body", b"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nabc"),
    Case("not-modified-with-body", b"HTTP/1.1 304 Not Modified\r\n\r\nabc"),
    Case("crlf-after-answer", OK + b"Content-Length: 2\r\n\r\nhi\r\n"),
    Case("crlf-after-chunked", CHUNKED + b"2\r\nhi\r\n0\r\n\r\n\r\n"),
    Case(
        "answer-ahead",
        OK + b"Content-Length: 2\r\n\r\nhi" + OK + b"Content-Length: 4\r\n\r\nfake",
        stricter=READ_AHEAD,
    ),
    Case(
        "answer-ahead-chunked",
        CHUNKED + b"2\r\nhi\r\n0\r\n\r\n" + OK + b"Content-Length: 4\r\n\r\nfake",
        stricter=READ_AHEAD,
    ),
    Case(
        "data-after-close",
        OK
        + b"Connection: close\r\nContent-Length: 2\r\n\r\nhi"
        + OK
        + b"Content-Length: 0\r\n\r\n",
    ),
    Case(
        "huge-head", OK + _header_bytes(70_000) + b"Content-Length: 2\r\n\r\nhi", stricter=HUGE_HEAD
    ),
    Case("huge-head-no-end", OK + _header_bytes(70_000), eof=True),
    Case(
        "content-coding-br",
        OK + b"Content-Encoding: br\r\nContent-Length: 2\r\n\r\nhi",
        stricter=CODING,
    ),
]
