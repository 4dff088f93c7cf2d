"""No unit test asserts elapsed wall time (issue 28, "Time you can fake").

A unit test that checks how long something took on the real clock fails when the machine is
loaded, and its bounds then get raised until they prove little. Code takes a
:class:`~setpoint.api.clock.Clock` instead, and its tests move a ``ManualClock``
(``tests/_support/virtual_time.py``: ``RecordingClock``, ``run_timers``) or assert what
happened (a timer was set with delay X, an event fired) rather than when.

The guard parses every module under ``tests/unit`` and fails on an ``assert`` whose
comparison uses a value read from the wall clock in the same top-level function: a call of
``time.monotonic()``, ``time.perf_counter()``, ``time.time()`` (and their ``_ns`` forms,
however imported) or ``loop.time()``, or a name assigned from one of them, from arithmetic,
``min``/``max``/``abs``/``round`` over them, or from a container they were put in
(``spans.append((started, loop.time()))`` then ``started, ended = spans[0]``). The dataflow
is deliberately simple: a value that passes through any other call is not followed.

A test that truly needs the real clock (a real subprocess's own timeout, say) must still not
assert how long it took. If a comparison on the real clock is the point of the test (an
adapter to the loop's clock, for instance), the ``assert`` carries the comment
``# wall-time-ok: <why>`` on one of its lines, and the reason is reviewed like code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"
HELPER = "tests/_support/virtual_time.py"

_TIME_FUNCTIONS = frozenset(
    {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"}
)
_LOOP_GETTERS = frozenset({"get_running_loop", "get_event_loop"})
_TRANSPARENT_CALLS = frozenset({"min", "max", "abs", "round", "float", "int", "approx"})
_CONTAINER_ADDS = frozenset({"append", "add", "extend", "insert", "appendleft"})
_OPT_OUT = re.compile(r"#\s*wall-time-ok:\s*\S")


@dataclass(frozen=True)
class Finding:
    """One ``assert`` that compares a wall-clock reading."""

    path: str
    line: int
    function: str
    source: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.function}() asserts on wall time: {self.source}"


class _Imports:
    """How a module spells the ``time`` module and its clock functions."""

    def __init__(self, tree: ast.Module) -> None:
        self.modules: set[str] = set()  # names bound to the time module
        self.functions: set[str] = set()  # names bound to time.monotonic and friends
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self.modules.update(a.asname or a.name for a in node.names if a.name == "time")
            elif isinstance(node, ast.ImportFrom) and node.module == "time" and node.level == 0:
                self.functions.update(
                    a.asname or a.name for a in node.names if a.name in _TIME_FUNCTIONS
                )


def _is_loop(node: ast.expr) -> bool:
    """``loop``, ``self._loop``, ``asyncio.get_running_loop()`` and the like."""
    if isinstance(node, ast.Name):
        return "loop" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "loop" in node.attr.lower()
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _LOOP_GETTERS
    return False


class _Function:
    """The wall-clock dataflow of one top-level function (nested functions included)."""

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef, imports: _Imports) -> None:
        self.node = node
        self.imports = imports
        self.tainted: set[str] = set()
        self._collect()

    def reads_clock(self, call: ast.Call) -> bool:
        """Whether ``call`` reads the wall clock."""
        func = call.func
        if isinstance(func, ast.Name):
            return func.id in self.imports.functions
        if not isinstance(func, ast.Attribute):
            return False
        if isinstance(func.value, ast.Name) and func.value.id in self.imports.modules:
            return func.attr in _TIME_FUNCTIONS
        return func.attr == "time" and not call.args and _is_loop(func.value)

    def derived(self, node: ast.expr | None) -> bool:
        """Whether ``node`` is a value computed from wall-clock readings."""
        match node:
            case ast.Call() if self.reads_clock(node):
                return True
            case ast.Call(func=ast.Name(id=name) | ast.Attribute(attr=name)) if (
                name in _TRANSPARENT_CALLS
            ):
                return any(self.derived(arg) for arg in node.args)
            case ast.Name(id=name):
                return name in self.tainted
            case ast.BinOp(left=left, right=right):
                return self.derived(left) or self.derived(right)
            case ast.UnaryOp(operand=operand):
                return self.derived(operand)
            case ast.IfExp(body=body, orelse=orelse):
                return self.derived(body) or self.derived(orelse)
            case ast.Tuple(elts=elts) | ast.List(elts=elts) | ast.Set(elts=elts):
                return any(self.derived(e) for e in elts)
            case ast.Subscript(value=value) | ast.Starred(value=value):
                return self.derived(value)
            case ast.NamedExpr(value=value) | ast.Await(value=value):
                return self.derived(value)
        return False

    def _collect(self) -> None:
        """Taint names until nothing changes (assignments may come in any order in loops)."""
        while True:
            before = len(self.tainted)
            for node in ast.walk(self.node):
                for target, value in _bindings(node):
                    if self.derived(value):
                        self.tainted.update(_names(target))
            if len(self.tainted) == before:
                return

    def findings(self) -> Iterator[ast.Assert]:
        """Every ``assert`` that compares a wall-clock value."""
        for node in ast.walk(self.node):
            if isinstance(node, ast.Assert) and any(
                isinstance(part, ast.Compare)
                and any(self.derived(side) for side in (part.left, *part.comparators))
                for part in ast.walk(node.test)
            ):
                yield node


def _bindings(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr | None]]:
    """``(target, value)`` of each name binding, and of each ``box.append(value)``."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield target, node.value
    elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
        yield node.target, node.value
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _CONTAINER_ADDS
        and isinstance(node.func.value, ast.Name)
    ):
        for arg in node.args:
            yield node.func.value, arg
    elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        yield node.target, node.iter


def _names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _names(element)
    elif isinstance(target, ast.Starred):
        yield from _names(target.value)


def check_source(source: str, path: str = "<snippet>") -> list[Finding]:
    """The asserts of ``source`` that compare wall-clock time, unless marked as allowed."""
    tree = ast.parse(source, filename=path)
    lines = source.splitlines()
    imports = _Imports(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not _top_level(tree, node):
            continue
        for statement in _Function(node, imports).findings():
            end = statement.end_lineno or statement.lineno
            span = lines[statement.lineno - 1 : end]
            if any(_OPT_OUT.search(line) for line in span):
                continue
            text = " ".join(line.strip() for line in span)
            found.append(Finding(path, statement.lineno, node.name, text))
    return sorted(found, key=lambda f: f.line)


def _top_level(tree: ast.Module, node: ast.AST) -> bool:
    """Module-level functions and methods of module-level classes (nested ones belong to them)."""
    for parent in tree.body:
        if parent is node:
            return True
        if isinstance(parent, ast.ClassDef) and any(child is node for child in parent.body):
            return True
    return False


def unit_test_files() -> Iterator[Path]:
    """Every Python file under tests/unit."""
    yield from sorted(p for p in UNIT.rglob("*.py") if "__pycache__" not in p.parts)


# -- the guard -------------------------------------------------------------------------------


def test_no_unit_test_asserts_elapsed_wall_time() -> None:
    findings = [
        finding
        for path in unit_test_files()
        for finding in check_source(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not findings, (
        f"{len(findings)} assert(s) compare wall-clock time, which fails on a loaded machine:\n"
        + "\n".join(f"  {f}" for f in findings)
        + f"\nRun the code on a Clock and move a ManualClock instead ({HELPER}: "
        "RecordingClock, run_timers), or assert what happened rather than when. Where the "
        "real clock is the point of the test, end the assert's line with "
        "'# wall-time-ok: <why>'."
    )


# -- the checker, on snippets ----------------------------------------------------------------

OLD_TEST_HTTP_218 = """
import time

async def test_a_deadline_ends_a_request_without_an_answer(pools):
    server = await Raw(never_answers).start()
    pool = pool_for(pools, server.url)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await pool.request("GET", "/", [], deadline=started + 0.2)
    elapsed = time.monotonic() - started
    server.close()
    assert 0.2 <= elapsed < 1.0
    assert pool._open == 0 and not pool._deadlines
"""


def test_the_checker_catches_the_old_test_http_218_pattern() -> None:
    """The assert that issue 28 names (test_http.py:218 before the client took a Clock)."""
    findings = check_source(OLD_TEST_HTTP_218, "tests/unit/client/test_http.py")
    assert [(f.line, f.function) for f in findings] == [
        (12, "test_a_deadline_ends_a_request_without_an_answer")
    ]
    assert str(findings[0]) == (
        "tests/unit/client/test_http.py:12: test_a_deadline_ends_a_request_without_an_answer() "
        "asserts on wall time: assert 0.2 <= elapsed < 1.0"
    )


def test_the_checker_follows_imports_loops_and_containers() -> None:
    source = """
import asyncio
import time as t
from time import perf_counter as pc

async def test_direct():
    loop = asyncio.get_running_loop()
    assert loop.time() > 0
    assert asyncio.get_running_loop().time() > 0

def test_aliases():
    a = t.time()
    b: float = pc()
    assert max(b - a, 0.0) < 1
    deadline = t.monotonic_ns() + 5
    assert pytest.approx(deadline) == 3

class TestGrouped:
    async def test_nested_closure(self):
        loop = asyncio.get_running_loop()
        spans = []
        async def work():
            started = loop.time()
            spans.append((started, loop.time()))
        await work()
        begin, end = spans[0]
        assert end - begin >= 0.3
"""
    assert [(f.line, f.function) for f in check_source(source)] == [
        (8, "test_direct"),
        (9, "test_direct"),
        (14, "test_aliases"),
        (16, "test_aliases"),
        (27, "test_nested_closure"),
    ]


def test_the_checker_leaves_virtual_time_and_other_values_alone() -> None:
    source = """
import time
from setpoint.api.clock import ManualClock

def test_manual_clock():
    clock = ManualClock()
    start = clock.now()
    clock.advance(1.0)
    assert clock.now() - start == 1.0

async def test_a_call_result_is_not_followed():
    started = time.monotonic()
    answer = await pool.request("GET", "/", [], deadline=started + 0.2)
    assert answer.status == 200

def test_a_real_deadline_that_is_only_a_guard():
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not done():
        pass
    assert done()

def test_an_unrelated_time_method():
    assert event.time() == "12:00"
"""
    assert check_source(source) == []


def test_the_opt_out_needs_a_reason_on_the_assert() -> None:
    source = """
import time

def test_marked():
    a = time.monotonic()
    assert a <= time.monotonic()  # wall-time-ok: the clock never goes backwards
    assert (
        a <= time.monotonic()  # wall-time-ok: a multi-line assert, marked inside
    )

def test_marked_without_a_reason():
    a = time.monotonic()
    assert a <= time.monotonic()  # wall-time-ok:
"""
    assert [(f.line, f.function) for f in check_source(source)] == [
        (13, "test_marked_without_a_reason")
    ]
