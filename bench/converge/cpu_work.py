"""The CPU-bound work item of the processes benchmark: ~20 ms of pure Python, a template render.

Issue 34's CPU-bound converge variant makes the first reconcile of each Widget do this
before its writes, so that the operator, not the API server, is the bottleneck; and
``bench/processes_alternatives.py`` runs the same item in one thread, in processes, in
subinterpreters and (where it can be had) on free-threaded CPython. It stands for what a
real reconcile does in Python: rendering a manifest from a template, computing a diff.

The work is a fixed amount of computation, not a fixed time: :data:`ROUNDS` renders of a
small Jinja-like template (``{{ dotted.path | filter }}`` placeholders, looked up in a
nested context, escaped), written in plain Python so that it holds the GIL throughout, as
template engines and diff code do. ``ROUNDS`` was chosen so one item takes ~20 ms of CPU on
the benchmark machine's Python 3.11; another interpreter or machine takes more or less, so
every benchmark reports the milliseconds one item took next to its results
(:func:`calibrate`).

It imports nothing outside the standard library, so a subinterpreter or another Python can
import it by path.
"""

from __future__ import annotations

import time
from collections.abc import Callable

TEMPLATE = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ widget.name }}
  namespace: {{ widget.namespace }}
  labels:
    app.kubernetes.io/name: {{ widget.name | lower }}
    app.kubernetes.io/instance: {{ widget.name }}-{{ round }}
    app.kubernetes.io/managed-by: {{ operator.name | upper }}
spec:
  replicas: {{ widget.size }}
  template:
    spec:
      containers:
        - name: {{ widget.name | lower }}
          image: {{ operator.registry }}/{{ widget.name }}:{{ operator.version }}
          args: [--size={{ widget.size }}, --round={{ round }}, --note={{ widget.note | quote }}]
"""

ROUNDS = 810
"""Renders per work item: ~20 ms of CPU on the benchmark machine with Python 3.11."""


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_FILTERS: dict[str, Callable[[str], str]] = {
    "lower": str.lower,
    "upper": str.upper,
    "quote": _quote,
}


def _parse(template: str) -> list[tuple[bool, str, tuple[str, ...]]]:
    """Split ``template`` into literal text and ``{{ path | filter ... }}`` placeholders."""
    parts: list[tuple[bool, str, tuple[str, ...]]] = []
    rest = template
    while rest:
        start = rest.find("{{")
        if start < 0:
            parts.append((False, rest, ()))
            break
        end = rest.index("}}", start)
        if start:
            parts.append((False, rest[:start], ()))
        pieces = [p.strip() for p in rest[start + 2 : end].split("|")]
        parts.append((True, pieces[0], tuple(pieces[1:])))
        rest = rest[end + 2 :]
    return parts


def _lookup(context: dict[str, object], path: str) -> str:
    value: object = context
    for key in path.split("."):
        if not isinstance(value, dict):
            raise KeyError(path)
        value = value[key]
    return str(value)


def render(name: str, size: int, rounds: int = ROUNDS) -> int:
    """Render the template ``rounds`` times for a Widget; return the output's total length.

    The template is parsed again on every round, as a reconcile that renders a user-given
    template would, and every character of the output is scanned once (an escaping pass),
    so the work is Python bytecode rather than one C call.
    """
    total = 0
    for i in range(rounds):
        context: dict[str, object] = {
            "widget": {
                "name": name,
                "namespace": "bench",
                "size": size + i,
                "note": f'rendered "{name}" #{i}',
            },
            "operator": {"name": "widget-operator", "registry": "example.org", "version": "1.0"},
            "round": i,
        }
        out: list[str] = []
        for is_placeholder, text, filters in _parse(TEMPLATE):
            if not is_placeholder:
                out.append(text)
                continue
            value = _lookup(context, text)
            for f in filters:
                value = _FILTERS[f](value)
            out.append(value)
        rendered = "".join(out)
        unsafe = 0
        for ch in rendered:
            if ch in "<>&":
                unsafe += 1
        total += len(rendered) + unsafe
    return total


def calibrate(items: int = 20) -> float:
    """The median CPU milliseconds one :func:`render` item takes in this thread."""
    times: list[float] = []
    for k in range(items):
        started = time.thread_time()
        render(f"calibrate-{k}", k)
        times.append((time.thread_time() - started) * 1000)
    times.sort()
    return times[len(times) // 2]


if __name__ == "__main__":
    print(f"{calibrate():.1f} ms per item ({ROUNDS} rounds)")
