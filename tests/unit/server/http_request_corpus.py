"""Request byte streams for the server's differential test against h11 (issue 27).

Each :class:`Case` is one client's bytes on one connection: a request, valid, edge or
hostile, followed by :data:`PROBE`, a second request. ``test_server_http1_differential.py``
feeds each stream to setpoint's server connection and to h11's server side and compares what
a client observes: which requests were handled, in order, with which bodies (a refused
request is never handled, and nothing after it is). A case where setpoint is stricter than
h11 says why in ``stricter``; no case may be laxer.
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE = b"GET /probe HTTP/1.1\r\nHost: h\r\n\r\n"
"""The second request on the connection: the one a hidden boundary would swallow or forge."""

GET = b"GET / HTTP/1.1\r\nHost: h\r\n"
POST = b"POST /p HTTP/1.1\r\nHost: h\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"

# The reasons setpoint is stricter, each named once.
TWO_FRAMINGS = (
    "Content-Length with Transfer-Encoding: RFC 9112 6.1 calls it a possible smuggling "
    "attempt a server ought to close after; h11 lets chunked win, llhttp refuses rather than "
    "choose"
)
TWO_LENGTHS = (
    "more than one Content-Length, even equal ones or a list: llhttp refuses (RFC 9112 6.3 "
    "allows either); h11 folds equal values into one"
)
BARE_LF = (
    "a bare LF as a line end: RFC 9112 2.2 lets a recipient accept it and h11 does; llhttp "
    "refuses it, so no header or request can hide where another parser sees a line end"
)
OBS_FOLD = (
    "a folded header line (obs-fold): RFC 9112 5.2 lets a server refuse it with 400 and "
    "llhttp does; h11 joins it to the line before"
)
DEL = (
    "DEL (0x7f) in a header value: RFC 9110 5.5 allows VCHAR, SP, HTAB and obs-text only; "
    "h11 lets DEL through, llhttp refuses it"
)
CHUNK_SPACE = (
    "whitespace after a chunk size: h11 skips it, llhttp refuses it (a chunk size is hex "
    "digits, then an extension or CRLF; 'BWS' there is a known smuggling vector)"
)
CHUNK_DIGITS = (
    "a chunk size of more than 16 hex digits, leading zeros included: setpoint's own check "
    "(a 64-bit size; Go's limit too, a parser that keeps fewer digits would read another "
    "size); h11 takes up to 20 digits"
)
CHUNK_EXTENSION = (
    "a chunk extension that is not token[=token|quoted-string] (RFC 9112 7.1.1), e.g. with "
    "a space, a NUL or a bare CR: llhttp checks its syntax, h11 skips everything up to CRLF"
)
LAST_CHUNK_LF = (
    "'0\\r\\n\\n' (the trailers ended by a bare LF): h11 ends the body there and reads "
    "what follows as the next request; llhttp reads the LF as the start of a trailer and "
    "refuses it, so the bytes after it can be taken neither as trailers (the old parser's "
    "request hiding, issue 27 finding 7) nor as a request another parser does not see"
)
HUGE_HEAD = (
    "a head of more than 64 KiB: h11 bounds a head only while it is incomplete (one that "
    "arrives whole in one read is taken at any size); setpoint bounds every head"
)
LONG_LINE = (
    "a line longer than 8,190 bytes (request line 414, header or chunk line 431/400): "
    "setpoint's limit since decision 0012 (nginx's and aiohttp's); h11 bounds only the head"
)
SMALL_CHUNKS = (
    "more than 1,024 chunks plus one per 256 bytes of data: setpoint's own bound on what a "
    "body costs the event loop per chunk (one-byte chunks would cost seconds); h11 has none"
)
MANY_HEADERS = (
    "more than 100 header (or trailer) lines: setpoint's limit since decision 0012; h11 has none"
)
VERSION = (
    "HTTP versions other than 1.0 and 1.1: h11 serves any HTTP/1.x and HTTP/2.0 request "
    "lines as HTTP/1.1; setpoint answers 505 (llhttp refuses 1.2 and up itself)"
)
METHOD = (
    "a method llhttp does not know (an extension method, or lower case): llhttp parses only "
    "registered methods; setpoint's endpoints serve GET, POST and HEAD"
)
ASTERISK = (
    "'*' as the target of a method other than OPTIONS: RFC 9112 3.2.4 allows it for OPTIONS only"
)
TARGET_FORM = (
    "a target that is neither a path, an http(s) absolute URL nor OPTIONS '*' (authority "
    "form, other schemes): setpoint serves no proxy and no CONNECT"
)
UPGRADE = (
    "a request asking to upgrade the connection: llhttp stops at its head and hands the rest "
    "to the new protocol; setpoint upgrades nothing, so it answers such a request (400 if it "
    "has a body, which llhttp would have skipped) and closes, where h11 goes on after a "
    "non-101 answer"
)
TRAILER_FRAMING = (
    "a framing header (Content-Length, Transfer-Encoding) among the trailers: llhttp refuses "
    "it (RFC 9110 6.5.1: framing fields are not allowed there); h11 ignores trailers' meaning"
)
HTTP2_PREFACE = (
    "the HTTP/2 connection preface: llhttp recognises it and refuses it as HTTP/1.1; h11 "
    "serves 'PRI *' as a request and then refuses the rest"
)


@dataclass(frozen=True)
class Case:
    """One client's stream; :data:`PROBE` follows it unless ``probe`` is false."""

    name: str
    request: bytes
    stricter: str = ""
    """Why setpoint refuses where h11 does not (empty: both must agree)."""
    probe: bool = True

    @property
    def stream(self) -> bytes:
        """The bytes on the connection."""
        return self.request + PROBE if self.probe else self.request


def _header_cases() -> list[Case]:
    """A control or separator byte at each place of a header line."""
    cases = []
    for byte, label in [
        (b"\x00", "nul"),
        (b"\r", "cr"),
        (b"\n", "lf"),
        (b" ", "space"),
        (b"\x0b", "vt"),
        (b"\x0c", "ff"),
        (b"\x7f", "del"),
        (b"\t", "tab"),
        (b"\x80", "obs-text"),
    ]:
        for where, line in [
            ("name-start", byte + b"X-A: v"),
            ("name", b"X" + byte + b"A: v"),
            ("before-colon", b"X-A" + byte + b": v"),
            ("value-start", b"X-A:" + byte + b"v"),
            ("value", b"X-A: v" + byte + b"w"),
            ("value-end", b"X-A: v" + byte),
        ]:
            stricter = ""
            if label == "del" and where.startswith("value"):
                stricter = DEL
            elif label == "lf" and where in {"name-start", "value-end"}:
                stricter = BARE_LF  # h11 ends the line (or the head) at the LF
            elif label in {"space", "tab"} and where == "name-start":
                stricter = OBS_FOLD  # a line starting with whitespace continues the one before
            cases.append(Case(f"{label}-in-header-{where}", GET + line + b"\r\n\r\n", stricter))
    return cases


CASES: list[Case] = [
    # -- valid ---------------------------------------------------------------------------------
    Case("get", GET + b"\r\n"),
    Case("post-content-length", POST + b"Content-Length: 5\r\n\r\nhello"),
    Case("post-empty-body", POST + b"Content-Length: 0\r\n\r\n"),
    Case("post-without-length", POST + b"\r\n"),
    Case("content-length-leading-zeros", POST + b"Content-Length: 0005\r\n\r\nhello"),
    Case("chunked", CHUNKED + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
    Case("chunked-upper-hex", CHUNKED + b"A\r\n0123456789\r\n0\r\n\r\n"),
    Case("chunked-leading-zeros", CHUNKED + b"0005\r\nhello\r\n0000\r\n\r\n"),
    Case("chunked-16-digits", CHUNKED + b"0000000000000005\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-extension", CHUNKED + b"5;a=b;c\r\nhello\r\n0;d=e\r\n\r\n"),
    Case("chunk-extension-quoted", CHUNKED + b'5;a="b c"\r\nhello\r\n0\r\n\r\n'),
    Case("trailers", CHUNKED + b"5\r\nhello\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n"),
    Case("transfer-encoding-case", POST + b"Transfer-Encoding: Chunked\r\n\r\n0\r\n\r\n"),
    Case(
        "pipelined",
        POST + b"Content-Length: 3\r\n\r\nabc" + GET + b"\r\n" + CHUNKED + b"1\r\nz\r\n0\r\n\r\n",
    ),
    Case("http-1.0", b"GET /old HTTP/1.0\r\n\r\n"),
    Case("http-1.0-keep-alive", b"GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
    Case("http-1.0-host", b"GET /old HTTP/1.0\r\nHost: h\r\n\r\n"),
    Case("connection-close", GET + b"Connection: close\r\n\r\n"),
    Case("connection-close-listed", GET + b"Connection: keep-alive, Close\r\n\r\n"),
    Case("expect-100-continue", POST + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\nok"),
    Case("absolute-form", b"GET http://h/a?b=c HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("absolute-form-https", b"GET https://h:8443/a HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("asterisk-options", b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("percent-encoded", b"GET /a%20b?x=%41&y HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("fragment", b"GET /a#f HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("odd-target-bytes", b'GET /a|b{}^`"<>\\ HTTP/1.1\r\nHost: h\r\n\r\n'),
    Case("head", b"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("empty-value", GET + b"X-A:\r\n\r\n"),
    Case("no-space-after-colon", GET + b"X-A:v\r\n\r\n"),
    Case("whitespace-around-value", GET + b"X-A: \t v \t\r\n\r\n"),
    Case("repeated-header", GET + b"X-A: 1\r\nx-a: 2\r\n\r\n"),
    Case("empty-host", b"GET / HTTP/1.1\r\nHost:\r\n\r\n"),
    Case(
        "big-head",
        GET + b"".join(b"X-%02d: %s\r\n" % (i, b"v" * 3000) for i in range(20)) + b"\r\n",
    ),
    Case("100-headers", GET + b"".join(b"X-%d: 1\r\n" % i for i in range(99)) + b"\r\n"),
    Case("8190-byte-header-line", GET + b"X-A: " + b"v" * 8185 + b"\r\n\r\n"),
    Case("long-body", POST + b"Content-Length: 100000\r\n\r\n" + b"b" * 100000),
    Case("crlf-after-request", GET + b"\r\n\r\n"),
    # -- framing ambiguities ------------------------------------------------------------------
    Case(
        "cl-and-te",
        POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        TWO_FRAMINGS,
    ),
    Case(
        "te-and-cl",
        POST + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        TWO_FRAMINGS,
    ),
    Case(
        "two-equal-lengths",
        POST + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        TWO_LENGTHS,
    ),
    Case("two-lengths", POST + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
    Case("length-list", POST + b"Content-Length: 3, 3\r\n\r\nabc", TWO_LENGTHS),
    Case("length-plus", POST + b"Content-Length: +3\r\n\r\nabc"),
    Case("length-negative", POST + b"Content-Length: -3\r\n\r\nabc"),
    Case("length-hex", POST + b"Content-Length: 0x3\r\n\r\nabc"),
    Case("length-empty", POST + b"Content-Length: \r\n\r\n"),
    Case("length-overflow", POST + b"Content-Length: 99999999999999999999999\r\n\r\nabc"),
    Case("length-space-inside", POST + b"Content-Length: 1 2\r\n\r\nabcdefghijkl"),
    Case("length-too-long-for-stream", POST + b"Content-Length: 500\r\n\r\nabc"),
    Case("te-gzip-chunked", POST + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
    Case("te-chunked-chunked", POST + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
    Case(
        "te-twice",
        POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    Case("te-identity", POST + b"Transfer-Encoding: identity\r\n\r\n"),
    Case("te-gzip", POST + b"Transfer-Encoding: gzip\r\n\r\nabc"),
    Case("te-empty", POST + b"Transfer-Encoding:\r\n\r\n"),
    Case("te-vt", POST + b"Transfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n"),
    Case("te-space-before-colon", POST + b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
    Case(
        "te-on-http-1.0",
        b"POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "Transfer-Encoding on HTTP/1.0: RFC 9112 6.1 says the framing is faulty; h11 reads it "
        "as chunked",
    ),
    # -- chunks -------------------------------------------------------------------------------
    Case("chunk-size-leading-space", CHUNKED + b" 5\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-leading-tab", CHUNKED + b"\t5\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-trailing-space", CHUNKED + b"5 \r\nhello\r\n0\r\n\r\n", CHUNK_SPACE),
    Case("chunk-size-trailing-tab", CHUNKED + b"5\t\r\nhello\r\n0\r\n\r\n", CHUNK_SPACE),
    Case("chunk-size-space-before-extension", CHUNKED + b"5 ;a\r\nhello\r\n0\r\n\r\n"),
    Case(
        "chunk-size-17-digits", CHUNKED + b"00000000000000005\r\nhello\r\n0\r\n\r\n", CHUNK_DIGITS
    ),
    Case(
        "chunk-size-20-digits",
        CHUNKED + b"00000000000000000005\r\nhello\r\n0\r\n\r\n",
        CHUNK_DIGITS,
    ),
    Case("chunk-size-21-digits", CHUNKED + b"000000000000000000005\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-overflow", CHUNKED + b"10000000000000000\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-64-bit", CHUNKED + b"ffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-not-hex", CHUNKED + b"5g\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-negative", CHUNKED + b"-5\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-plus", CHUNKED + b"+5\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-missing", CHUNKED + b"\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-0x", CHUNKED + b"0x5\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-bare-lf", CHUNKED + b"5\nhello\r\n0\r\n\r\n"),
    Case("chunk-size-bare-cr", CHUNKED + b"5\rhello\r\n0\r\n\r\n"),
    Case("chunk-extension-bare-lf", CHUNKED + b"5;a\nb\r\nhello\r\n0\r\n\r\n"),
    Case("chunk-extension-bare-cr", CHUNKED + b"5;a\rb\r\nhello\r\n0\r\n\r\n", CHUNK_EXTENSION),
    Case("chunk-extension-space", CHUNKED + b"5;a b\r\nhello\r\n0\r\n\r\n", CHUNK_EXTENSION),
    Case("chunk-extension-empty", CHUNKED + b"5;\r\nhello\r\n0\r\n\r\n", CHUNK_EXTENSION),
    Case("chunk-extension-nul", CHUNKED + b"5;a\x00\r\nhello\r\n0\r\n\r\n", CHUNK_EXTENSION),
    Case(
        "chunk-extension-long", CHUNKED + b"5;" + b"a" * 9000 + b"\r\nhello\r\n0\r\n\r\n", LONG_LINE
    ),
    # 1,024 chunks, plus one per 256 bytes: 1,028 one-byte chunks are the most
    Case("1028-one-byte-chunks", CHUNKED + b"1\r\nx\r\n" * 1028 + b"0\r\n\r\n"),
    Case("1029-one-byte-chunks", CHUNKED + b"1\r\nx\r\n" * 1029 + b"0\r\n\r\n", SMALL_CHUNKS),
    Case("chunk-data-too-long", CHUNKED + b"5\r\nhello!\r\n0\r\n\r\n"),
    Case("chunk-data-bare-lf", CHUNKED + b"5\r\nhello\n0\r\n\r\n"),
    Case("chunk-data-no-crlf", CHUNKED + b"5\r\nhelloXX0\r\n\r\n"),
    Case("last-chunk-missing", CHUNKED + b"5\r\nhello\r\n"),
    Case("last-chunk-bare-lf", CHUNKED + b"5\r\nhello\r\n0\n\r\n"),
    Case("last-chunk-no-final-crlf", CHUNKED + b"5\r\nhello\r\n0\r\n", probe=False),
    Case("last-chunk-then-bare-lf", CHUNKED + b"5\r\nhello\r\n0\r\n\n", LAST_CHUNK_LF),
    Case(
        "request-hidden-in-trailers",
        CHUNKED + b"5\r\nhello\r\n0\r\n\nGET /hidden HTTP/1.1\r\nHost: h\r\n\r\n",
        LAST_CHUNK_LF,
    ),
    Case("trailer-bare-lf", CHUNKED + b"5\r\nhello\r\n0\r\nX: t\nY: u\r\n\r\n", BARE_LF),
    Case("trailer-garbage", CHUNKED + b"5\r\nhello\r\n0\r\ngarbage\r\n\r\n"),
    Case("trailer-space-before-colon", CHUNKED + b"5\r\nhello\r\n0\r\nX : t\r\n\r\n"),
    Case("trailer-nul", CHUNKED + b"5\r\nhello\r\n0\r\nX: \x00\r\n\r\n"),
    Case("trailer-obs-fold", CHUNKED + b"5\r\nhello\r\n0\r\nX: a\r\n b\r\n\r\n", OBS_FOLD),
    Case(
        "trailer-content-length",
        CHUNKED + b"5\r\nhello\r\n0\r\nContent-Length: 5\r\n\r\n",
        TRAILER_FRAMING,
    ),
    Case(
        "101-trailers",
        CHUNKED + b"0\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n",
        MANY_HEADERS,
    ),
    Case("trailer-bare-cr", CHUNKED + b"5\r\nhello\r\n0\r\nX: t\r\r\n\r\n"),
    # -- the request line ---------------------------------------------------------------------
    Case("no-host", b"GET / HTTP/1.1\r\n\r\n"),
    Case("two-hosts", b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"),
    Case("two-hosts-http-1.0", b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"),
    Case("double-space-after-method", b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("double-space-before-version", b"GET /  HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("space-after-version", b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n"),
    Case("tab-separator", b"GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("space-in-target", b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("leading-crlf", b"\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("leading-lf", b"\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("request-line-bare-lf", b"GET / HTTP/1.1\nHost: h\r\n\r\n", BARE_LF),
    Case("head-end-bare-lf", b"GET / HTTP/1.1\r\nHost: h\r\n\n", BARE_LF),
    Case("all-bare-lf", b"GET / HTTP/1.1\nHost: h\n\n", BARE_LF),
    Case("all-bare-lf-then-eof", b"GET / HTTP/1.1\nHost: h\n\n", BARE_LF, probe=False),
    Case("head-cut-by-eof", b"GET / HTTP/1.1\r\nHost: h\r\n", probe=False),
    Case("request-line-bare-cr", b"GET / HTTP/1.1\rHost: h\r\n\r\n"),
    Case("nul-in-target", b"GET /a\x00 HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("del-in-target", b"GET /a\x7f HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("obs-text-in-path", b"GET /a\xff HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("obs-text-in-query", b"GET /a?\x80 HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("lower-case-method", b"get / HTTP/1.1\r\nHost: h\r\n\r\n", METHOD),
    Case("extension-method", b"FROB / HTTP/1.1\r\nHost: h\r\n\r\n", METHOD),
    Case("method-not-token", b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n"),
    Case("http-1.2", b"GET / HTTP/1.2\r\nHost: h\r\n\r\n", VERSION),
    Case("http-2.0", b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", VERSION),
    Case("http-0.9", b"GET / HTTP/0.9\r\nHost: h\r\n\r\n", VERSION),
    Case("http-lower-case", b"GET / http/1.1\r\nHost: h\r\n\r\n"),
    Case("no-version", b"GET /\r\nHost: h\r\n\r\n"),
    Case("asterisk-get", b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", ASTERISK),
    Case("authority-form", b"CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", TARGET_FORM),
    Case("authority-form-get", b"GET h:443 HTTP/1.1\r\nHost: h\r\n\r\n", TARGET_FORM),
    Case("other-scheme", b"GET ftp://h/a HTTP/1.1\r\nHost: h\r\n\r\n", TARGET_FORM),
    Case("relative-target", b"GET a/b HTTP/1.1\r\nHost: h\r\n\r\n", TARGET_FORM),
    Case("http2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", HTTP2_PREFACE),
    Case("long-request-line", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: h\r\n\r\n", LONG_LINE),
    # -- headers ------------------------------------------------------------------------------
    Case("obs-fold", GET + b"X-A: 1\r\n folded\r\n\r\n", OBS_FOLD),
    Case("obs-fold-tab", GET + b"X-A: 1\r\n\tfolded\r\n\r\n", OBS_FOLD),
    Case("first-header-folded", b"GET / HTTP/1.1\r\n Host: h\r\n\r\n"),
    Case("no-colon", GET + b"X-A\r\n\r\n"),
    Case("empty-name", GET + b": v\r\n\r\n"),
    Case("name-not-token", GET + b"X@A: v\r\n\r\n"),
    Case(
        "huge-head",
        GET + b"".join(b"X-%02d: %s\r\n" % (i, b"v" * 4000) for i in range(20)) + b"\r\n",
        HUGE_HEAD,
    ),
    Case(
        "101-headers",
        GET + b"".join(b"X-%d: 1\r\n" % i for i in range(100)) + b"\r\n",
        MANY_HEADERS,
    ),
    Case("long-header-line", GET + b"X-A: " + b"v" * 9000 + b"\r\n\r\n", LONG_LINE),
    # -- upgrades -----------------------------------------------------------------------------
    Case("upgrade", GET + b"Connection: upgrade\r\nUpgrade: h2c\r\n\r\n", UPGRADE),
    Case(
        "upgrade-with-body",
        POST + b"Connection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 5\r\n\r\nhello",
        UPGRADE,
    ),
    Case("upgrade-header-only", GET + b"Upgrade: h2c\r\n\r\n"),
    *_header_cases(),
]
