"""A test run leaves no file in the checkout (issue 28).

The session check of tests/conftest.py is proven on snapshots fed to it and on a throwaway
repository under tmp_path, never by writing into this checkout. The two tools that wrote
into it are proven to write elsewhere: kubectl's discovery cache (58 files under ``.kube/``
were committed: kubectl without ``HOME`` caches in ``./.kube``) and hypothesis's
``.hypothesis/`` directory.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis.configuration import storage_directory

from tests._support.checkout import left_behind, parse_porcelain, report, snapshot
from tests._support.kubectl import kubectl_binary

ROOT = Path(__file__).resolve().parents[2]


def test_new_modified_and_deleted_files_are_left_behind() -> None:
    before = {"notes.txt": "??", "src/a.py": " M"}
    after = {
        "notes.txt": "??",  # untracked before the run too: someone's work, not the run's
        "src/a.py": "MM",  # its status changed during the run
        "src/b.py": " M",  # a tracked file the run modified
        "src/c.py": " D",  # ... or deleted
        ".kube/cache/discovery/127.0.0.1_34815/servergroups.json": "??",
    }
    assert left_behind(before, after) == [
        "?? .kube/cache/discovery/127.0.0.1_34815/servergroups.json",
        "MM src/a.py",
        " M src/b.py",
        " D src/c.py",
    ]
    assert left_behind(after, after) == []
    assert left_behind(after, {"notes.txt": "??"}) == []  # what the run cleaned up is fine


def test_the_report_names_every_file_and_what_to_do() -> None:
    message = report(Path("/repo"), ["?? .kube/a.json", " M README.md"])
    assert "left 2 file(s) in the checkout /repo" in message
    assert "\n  ?? .kube/a.json\n   M README.md\n" in message
    assert "tmp_path" in message and "KUBECACHEDIR" in message
    assert "SETPOINT_SKIP_CHECKOUT_CHECK=1" in message


def test_porcelain_entries_with_spaces_and_renames() -> None:
    output = b"?? dir/with space.txt\0R  new.py\0old.py\0 M src/x.py\0"
    assert parse_porcelain(output) == {
        "dir/with space.txt": "??",
        "new.py": "R ",
        "src/x.py": " M",
    }
    assert parse_porcelain(b"") == {}


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_a_snapshot_sees_untracked_files_in_new_directories_but_not_ignored_ones(
    tmp_path: Path,
) -> None:
    if shutil.which("git") is None:
        pytest.fail("git is not installed: the clean-checkout check needs it")
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text(".venv/\n")
    (tmp_path / "kept.py").write_text("x = 1\n")
    git(tmp_path, "add", ".gitignore", "kept.py")
    git(tmp_path, "commit", "-q", "-m", "start")
    before = snapshot(tmp_path)
    assert before == {}
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("")
    (tmp_path / ".kube" / "cache").mkdir(parents=True)
    (tmp_path / ".kube" / "cache" / "servergroups.json").write_text("{}")
    (tmp_path / "kept.py").write_text("x = 2\n")
    after = snapshot(tmp_path)
    assert after is not None
    assert left_behind(before, after) == [
        "?? .kube/cache/servergroups.json",
        " M kept.py",
    ]
    assert snapshot(tmp_path / ".kube") == after  # from a subdirectory: the whole tree


def test_outside_a_git_work_tree_there_is_no_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # git looks no higher than tmp_path's parent, so tmp_path is outside any work tree
    # wherever the temporary directory lives.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    inside = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    assert inside.returncode != 0, f"{tmp_path} is inside a git work tree"
    assert snapshot(tmp_path) is None


class _Discovery(http.server.BaseHTTPRequestHandler):
    """Just enough of the discovery API for ``kubectl get namespaces``."""

    answers = {
        "/api": {"kind": "APIVersions", "versions": ["v1"]},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
        "/api/v1": {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [
                {
                    "name": "namespaces",
                    "singularName": "namespace",
                    "namespaced": False,
                    "kind": "Namespace",
                    "verbs": ["get", "list"],
                }
            ],
        },
        "/api/v1/namespaces": {
            "kind": "NamespaceList",
            "apiVersion": "v1",
            "metadata": {},
            "items": [],
        },
    }

    def do_GET(self) -> None:
        body = json.dumps(self.answers.get(self.path.partition("?")[0], {})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def discovery_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Discovery)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_kubectl_caches_discovery_outside_the_checkout(
    tmp_path: Path, discovery_server: str
) -> None:
    """kubectl run by a test, even without HOME, writes its cache where the session says.

    Without ``HOME`` kubectl caches discovery in ``./.kube/cache`` of its working
    directory, which was the checkout: that is how ``.kube/`` got committed.
    """
    env = {k: v for k, v in os.environ.items() if k != "HOME"}
    done = subprocess.run(
        [kubectl_binary(), "--server", discovery_server, "get", "namespaces"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / ".kube").exists(), "kubectl cached discovery in its working directory"
    cache = os.environ.get("KUBECACHEDIR")
    assert cache, "tests/conftest.py sets KUBECACHEDIR for every tool the tests run"
    assert not Path(cache).resolve().is_relative_to(ROOT)
    port = discovery_server.rpartition(":")[2]
    assert (Path(cache) / "discovery" / f"127.0.0.1_{port}" / "servergroups.json").is_file()


def test_hypothesis_keeps_its_database_outside_the_checkout() -> None:
    """hypothesis writes ``.hypothesis/`` into the working directory unless told otherwise."""
    where = storage_directory("examples", intent_to_write=False).path.resolve()
    assert not where.is_relative_to(ROOT), where
