"""CPU time to split one long watch line that arrives in small chunks (issue 18, item 6).

Not a test: it prints the median [min-max] CPU seconds of 3 runs of feeding one line of
``--mib`` MiB in ``--chunk``-byte chunks to

- ``rescan``: the decoding loop setpoint used before issue 18 (it searched the whole buffer
  for a newline again on every chunk), reproduced here as the baseline;
- ``WatchDecoder``: the decoder the client uses now (only each new chunk is searched).

The line is one valid ADDED event, so both end by decoding it once with orjson; the
difference is the newline search. The limit on line length is lifted for the measurement.

Run::

    .venv/bin/python bench/watch_decode.py --mib 32 --chunk 4096
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson
from _common import Summary, markdown_table, ratio, run_header

from setpoint.client._watchdecode import WatchDecoder


def rescan(chunks: list[bytes]) -> int:
    """The pre-issue-18 loop: append, then search the buffer from its start."""
    buffer = bytearray()
    events = 0
    for chunk in chunks:
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", start)) != -1:
            line = bytes(buffer[start:end])
            start = end + 1
            if line.strip():
                orjson.loads(line)
                events += 1
        del buffer[:start]
    return events


def decoder(chunks: list[bytes]) -> int:
    """The current decoder."""
    dec = WatchDecoder("bench", max_line=1 << 40)
    return sum(len(dec.feed(chunk)) for chunk in chunks)


def measure(run: Callable[[list[bytes]], int], chunks: list[bytes], repeat: int) -> Summary:
    """CPU seconds of ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        started = time.process_time()
        assert run(chunks) == 1
        times.append(time.process_time() - started)
    return Summary.of(times)


def main() -> None:
    """Measure both loops and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32, help="length of the line in MiB")
    parser.add_argument("--chunk", type=int, default=4096, help="chunk size in bytes")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    payload = b"x" * (args.mib << 20)
    line = orjson.dumps({"type": "ADDED", "object": {"data": {"k": payload.decode()}}}) + b"\n"
    chunks = [line[i : i + args.chunk] for i in range(0, len(line), args.chunk)]
    base = measure(rescan, chunks, args.repeat)
    new = measure(decoder, chunks, args.repeat)
    print(run_header())
    print(f"- One {args.mib} MiB line in {len(chunks)} chunks of {args.chunk} bytes\n")
    print(
        markdown_table(
            ["loop", "CPU s", "x rescan"],
            [
                ["rescan (before issue 18)", base.spread(digits=3), "1.00x"],
                ["WatchDecoder", new.spread(digits=3), ratio(new.median, base.median)],
            ],
        )
    )


if __name__ == "__main__":
    main()
