"""Release check: build setpoint, install the wheel far from the checkout, run an operator's tests.

What a user gets from ``pip install setpoint`` is the wheel, not this repository. This
script checks that wheel the way a user would meet it:

1. Builds the sdist, then the wheel *from the sdist* (``python -m build``), and a second
   wheel straight from the tree; the two wheels must hold the same files, byte for byte
   (the sdist builds the same wheel).
2. ``twine check --strict`` on both archives (metadata PyPI would accept, a README that
   renders); LICENSE must be in both, CHANGELOG.md in the sdist.
3. Creates a fresh virtualenv in a temporary directory and installs
   ``<wheel>[testing]`` into it. Every later step runs there: the working directory is
   the temporary directory, PYTHONPATH and the setpoint variables are cleared, and the
   script fails if ``setpoint.__file__`` or any ``sys.path`` entry points into the checkout.
4. ``setpoint --version`` reports the version in pyproject.toml; ``setpoint demo`` fails
   with its one-line "needs a checkout" message, no traceback.
5. ``setpoint controlplane build`` through the installed package: it finds the Go module
   inside the installed wheel and builds the control plane, or reuses
   ``~/.cache/setpoint`` when the binaries are there. ``go build`` then compiles the etcd
   stub from the *installed* module into the temporary directory, so the wheel's Go
   module is proven complete even when every binary was cached. ``--fresh-cache``
   builds everything into an empty cache instead (slow: minutes).
6. Copies ``examples/quickstart`` (a small operator project) into the temporary directory
   and runs its unit and integration tests there with the installed pytest plugin,
   against a control plane that plugin starts. Passes only if both kinds ran and none
   failed or was skipped.
7. The runtime alone (docs/packaging.md): installs ``<wheel>`` with no extra into a second
   fresh virtualenv and prints its dependency list (pip's resolved set) and installed size
   (bytes and files per distribution); none of the ``tools`` extra's distributions may be
   in it. There: ``setpoint run --help`` works, tool commands fail in one line naming the
   extra, the tenants operator (``examples/tenants``, copied) imports, and its unit tests
   pass with pytest and pytest-asyncio added (not the ``testing`` extra, which brings the
   tools).
8. The tenants operator run by the runtime-only install against a real control plane,
   started by the first virtualenv (the tools): the CRD from ``config/crd/bases``, one
   Tenant made Ready (its namespace with its label), deleted through the operator's
   finalizer, then SIGTERM: exit 0 and no traceback in the operator's log.

Run: ``make release-check`` (or ``.venv/bin/python scripts/release_check.py [--keep]``).
Each step prints its time; the total is the last line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "examples" / "quickstart"
# The operator a runtime-only install must run (steps 7 and 8).
RUNTIME_OPERATOR = ROOT / "examples" / "tenants"
# Its unit tests that use a tool: this one compares the checked-in manifests with what
# `setpoint generate` writes (a build step, run where the tools are installed).
TOOLS_UNIT_TESTS = ("test_unit_manifests.py",)
# The repository's pytest settings the tenants tests rely on (pyproject.toml is not copied).
PYTEST_SETTINGS = (
    "--import-mode=importlib",
    "-o",
    "asyncio_mode=auto",
    "-o",
    "asyncio_default_fixture_loop_scope=session",
    "-o",
    "asyncio_default_test_loop_scope=session",
)
# Variables that could make the installed package reach back into the checkout.
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "SETPOINT_CONTROLPLANE_SRC")


class CheckFailed(Exception):
    """A release-check step failed; the message says which and why."""


class Steps:
    """Runs the steps, timing each one."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def step(self, title: str) -> None:
        """Announce a step with the elapsed time."""
        print(f"\n== {title}  [{time.monotonic() - self.started:5.1f}s]", flush=True)

    def total(self) -> float:
        """Seconds since the check started."""
        return time.monotonic() - self.started


def run(
    command: Sequence[str | Path],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    capture: bool = False,
) -> str:
    """Run a command; raise :class:`CheckFailed` with its output when it fails."""
    shown = " ".join(str(c) for c in command)
    print(f"$ {shown}", flush=True)
    result = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=capture,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        output = ((result.stdout or "") + (result.stderr or "")).strip()
        raise CheckFailed(f"`{shown}` exited {result.returncode}\n{output[-4000:]}")
    return result.stdout if capture else ""


def wheel_digests(wheel: Path) -> dict[str, str]:
    """Each file of a wheel and the SHA-256 of its bytes."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: hashlib.sha256(archive.read(name)).hexdigest()
            for name in archive.namelist()
            if not name.endswith("/")
        }


def build(steps: Steps, out: Path) -> tuple[Path, Path]:
    """Build the sdist and the wheel from it, and a wheel from the tree; compare the wheels."""
    steps.step("build the sdist, the wheel from the sdist, and a wheel from the tree")
    python = sys.executable
    # setuptools stages an in-tree build in build/lib; files left there by an older build
    # would end up in the tree's wheel (the comparison below would catch it, confusingly).
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)
    for staged in (ROOT / "build").glob("bdist.*"):
        shutil.rmtree(staged, ignore_errors=True)
    run([python, "-m", "build", "--outdir", out / "dist", ROOT], cwd=ROOT, capture=True)
    run([python, "-m", "build", "--wheel", "--outdir", out / "tree", ROOT], cwd=ROOT, capture=True)
    (sdist,) = (out / "dist").glob("*.tar.gz")
    (wheel,) = (out / "dist").glob("*.whl")
    (tree_wheel,) = (out / "tree").glob("*.whl")
    from_sdist, from_tree = wheel_digests(wheel), wheel_digests(tree_wheel)
    if from_sdist != from_tree:
        differ = sorted(
            name
            for name in from_sdist.keys() | from_tree.keys()
            if from_sdist.get(name) != from_tree.get(name)
        )
        raise CheckFailed(f"the wheel built from the sdist differs from the tree's: {differ}")
    print(f"{sdist.name}: {sdist.stat().st_size / 1024:.0f} KiB")
    print(f"{wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB, {len(from_sdist)} files")
    print("the wheel built from the sdist is identical, file by file, to the tree's")
    return sdist, wheel


def check_archives(steps: Steps, sdist: Path, wheel: Path) -> None:
    """``twine check --strict``, and the files a user must find in each archive."""
    steps.step("twine check --strict; LICENSE and CHANGELOG in the archives")
    run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel], cwd=ROOT)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        raise CheckFailed(f"{wheel.name} has no dist-info/licenses/LICENSE")
    with tarfile.open(sdist) as archive:
        members = {Path(m).relative_to(Path(m).parts[0]).as_posix() for m in archive.getnames()}
    for required in ("LICENSE", "CHANGELOG.md", "pyproject.toml"):
        if required not in members:
            raise CheckFailed(f"{sdist.name} has no {required}")
    license_text = (ROOT / "LICENSE").read_text()
    if "Apache License" not in license_text or "Version 2.0" not in license_text:
        raise CheckFailed("LICENSE is not the Apache License 2.0 the metadata declares")
    print("LICENSE (Apache-2.0) in both; CHANGELOG.md in the sdist")


def clean_env(work: Path, venv: Path, cache: Path | None) -> dict[str, str]:
    """The environment of every command run in the virtualenv: no way back to the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["HOME"] = env.get("HOME", str(Path.home()))
    env["TMPDIR"] = str(work / "tmp")
    if cache is not None:
        env["SETPOINT_CACHE_DIR"] = str(cache)
    return env


def install(steps: Steps, work: Path, wheel: Path, env: dict[str, str]) -> Path:
    """A fresh virtualenv with ``<wheel>[testing]``; prove it imports nothing from the checkout."""
    steps.step("fresh virtualenv outside the checkout; pip install '<wheel>[testing]'")
    venv = work / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", venv], cwd=work, env=env)
    python = venv / "bin" / "python"
    # --no-compile: byte-compiling every dependency is most of the install's CPU time.
    install_command = [python, "-m", "pip", "install", "--quiet", "--no-compile"]
    run([*install_command, f"{wheel}[testing]"], cwd=work, env=env)
    probe = (
        "import sys, setpoint, setpoint.testing.build as b, pytest, pytest_asyncio;"
        "print(setpoint.__file__);"
        "print(b.controlplane_source_dir());"
        "print('\\n'.join(p for p in sys.path if p))"
    )
    lines = run([python, "-c", probe], cwd=work, env=env, capture=True).splitlines()
    package, source, paths = Path(lines[0]), Path(lines[1]), lines[2:]
    for path in [package, source, *map(Path, paths)]:
        if path.resolve().is_relative_to(ROOT):
            raise CheckFailed(f"the virtualenv reaches into the checkout: {path}")
    if not package.resolve().is_relative_to(venv.resolve()):
        raise CheckFailed(f"setpoint imported from {package}, not from the virtualenv")
    if not source.resolve().is_relative_to(venv.resolve()):
        raise CheckFailed(f"the Go module was found at {source}, not in the installed package")
    print(f"setpoint imported from {package}")
    print(f"Go module found at {source}")
    print(f"no sys.path entry inside {ROOT}")
    return venv


def cli(steps: Steps, work: Path, venv: Path, env: dict[str, str]) -> None:
    """``setpoint --version`` matches pyproject; ``setpoint demo`` says it needs a checkout."""
    steps.step("setpoint --version; setpoint demo outside a checkout")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    shown = run([venv / "bin" / "setpoint", "--version"], cwd=work, env=env, capture=True)
    if shown.strip() != f"setpoint {declared}":
        raise CheckFailed(f"setpoint --version printed {shown.strip()!r}, expected {declared}")
    print(shown.strip())
    demo = subprocess.run(
        [str(venv / "bin" / "setpoint"), "demo"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if demo.returncode != 1 or "clone the setpoint repository" not in demo.stderr:
        raise CheckFailed(f"setpoint demo outside a checkout: {demo.returncode} {demo.stderr}")
    if "Traceback" in demo.stderr + demo.stdout:
        raise CheckFailed(f"setpoint demo printed a traceback:\n{demo.stderr}")
    print(f"setpoint demo: {demo.stderr.strip()}")


def control_plane(steps: Steps, work: Path, venv: Path, env: dict[str, str]) -> None:
    """Build or reuse the control plane through the installed package; compile the etcd stub."""
    steps.step("setpoint controlplane build (the installed package's Go module)")
    run([venv / "bin" / "setpoint", "controlplane", "build"], cwd=work, env=env)
    steps.step("go build the etcd stub from the installed Go module")
    source = Path(
        run(
            [
                venv / "bin" / "python",
                "-c",
                "import setpoint.testing.build as b; print(b.controlplane_source_dir())",
            ],
            cwd=work,
            env=env,
            capture=True,
        ).strip()
    )
    go = shutil.which("go")
    if go is None:
        raise CheckFailed("the Go toolchain is not on PATH")
    go_env = dict(env, CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    target = work / "etcd-from-wheel"
    command = [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", target, "./cmd/etcd"]
    run(command, cwd=source, env=go_env)
    version = run([target, "--version"], cwd=work, env=env, capture=True).splitlines()[0]
    print(f"{target.name}: {version}")


def operator_tests(steps: Steps, work: Path, venv: Path, env: dict[str, str]) -> None:
    """Run the quickstart operator's unit and integration tests with the installed plugin."""
    steps.step("an operator project's unit and integration tests, installed pytest plugin")
    project = work / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    report = work / "junit.xml"
    command = [
        venv / "bin" / "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        "-o",
        "junit_family=xunit1",
    ]
    run(command, cwd=project, env=env)
    cases = ET.parse(report).getroot().iter("testcase")
    outcomes: dict[str, list[str]] = {"unit": [], "integration": []}
    for case in cases:
        if any(case.find(tag) is not None for tag in ("failure", "error", "skipped")):
            raise CheckFailed(f"{case.get('classname')}::{case.get('name')} did not pass")
        kind = (
            "unit"
            if "test_unit_" in (case.get("file") or case.get("classname") or "")
            else ("integration")
        )
        outcomes[kind].append(str(case.get("name")))
    for kind, names in outcomes.items():
        if not names:
            raise CheckFailed(f"no {kind} test ran in the operator project")
        print(f"{kind}: {len(names)} passed ({', '.join(names)})")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise CheckFailed(f"pyproject.toml: cannot read the requirement {requirement!r}")
    return _normalized(match.group(1))


def _extra(name: str) -> list[str]:
    """The requirements of one of setpoint's extras in pyproject.toml, self-references left out."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    own = _normalized(project["name"])
    requirements: list[str] = project["optional-dependencies"][name]
    return [r for r in requirements if _requirement_name(r) != own]


# Run in a virtualenv: each installed distribution, its version, bytes and files on disk
# (from its RECORD), as JSON; pip, setuptools and wheel (the virtualenv's own) left out.
_SIZES = """
import json, sys
from importlib import metadata
from pathlib import Path
rows = []
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if name.lower() in ("pip", "setuptools", "wheel"):
        continue
    files = [Path(dist.locate_file(f)) for f in dist.files or ()]
    files = [f for f in files if f.is_file()]
    rows.append([name, dist.version, sum(f.stat().st_size for f in files), len(files)])
print(json.dumps(sorted(rows, key=lambda row: -row[2])))
"""


def installed_sizes(
    python: Path, work: Path, env: dict[str, str]
) -> list[tuple[str, str, int, int]]:
    """Each distribution installed for ``python``: name, version, bytes, files."""
    rows = json.loads(run([python, "-c", _SIZES], cwd=work, env=env, capture=True))
    return [(str(n), str(v), int(b), int(f)) for n, v, b, f in rows]


def runtime_install(steps: Steps, work: Path, wheel: Path, env: dict[str, str]) -> Path:
    """``<wheel>`` alone in a fresh virtualenv: its dependency list and size; no tool's."""
    steps.step("the runtime alone: pip install '<wheel>' (no extra) into a fresh virtualenv")
    venv = work / "runtime-venv"
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", venv], cwd=work, env=env)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--no-compile", wheel], cwd=work, env=env)
    rows = installed_sizes(python, work, env)
    print("| distribution | version | KiB | files |")
    print("| :--- | :--- | ---: | ---: |")
    for name, version, size, files in rows:
        print(f"| {name} | {version} | {size / 1024:,.0f} | {files} |")
    total, count = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"| **{len(rows)} distributions** | | **{total / 1024:,.0f}** | **{count}** |")
    print(f"runtime-only install: {total:,} bytes ({total / 2**20:.1f} MiB), {count} files")
    installed = {_normalized(r[0]) for r in rows}
    tools = {_requirement_name(r) for r in _extra("tools")} & installed
    if tools:
        raise CheckFailed(f"the runtime-only install holds the tools extra's {sorted(tools)}")
    print(f"none of the tools extra's distributions ({', '.join(_extra('tools'))}) installed")
    return venv


def _fails_naming_the_extra(command: list[str | Path], work: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(c) for c in command],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    shown = " ".join(str(c) for c in command[1:])
    lines = done.stderr.strip().splitlines()
    if (
        done.returncode != 1
        or len(lines) != 1
        or "pip install 'setpoint[tools]'" not in lines[0]
        or "Traceback" in done.stdout + done.stderr
    ):
        raise CheckFailed(
            f"`setpoint {shown}` without the tools extra: exit {done.returncode}, expected 1 "
            f"and one line naming the extra:\n{done.stdout}{done.stderr}"
        )
    return lines[0]


def runtime_checks(steps: Steps, work: Path, venv: Path, env: dict[str, str]) -> Path:
    """The runtime alone: ``run`` works, tools say what to install, the operator's unit tests."""
    steps.step("the runtime alone: setpoint run --help; tool commands name the extra")
    setpoint = venv / "bin" / "setpoint"
    run([setpoint, "--version"], cwd=work, env=env)
    usage = run([setpoint, "run", "--help"], cwd=work, env=env, capture=True)
    if "usage: setpoint run" not in usage:
        raise CheckFailed(f"setpoint run --help printed no usage:\n{usage}")
    print("setpoint run --help: usage printed")
    for command in (["crd", "diff", "old.yaml", "new.yaml"], ["generate", "crd", "tenants"]):
        line = _fails_naming_the_extra([setpoint, *command], work, env)
        print(f"setpoint {' '.join(command)}: {line}")

    steps.step("the runtime alone: import the tenants operator; its unit tests")
    project = work / "tenants"
    shutil.copytree(
        RUNTIME_OPERATOR, project, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.db")
    )
    operator_env = dict(env, PYTHONPATH=str(project))
    python = venv / "bin" / "python"
    probe = "import sys, tenants; print(tenants.setup.__module__, 're2' in sys.modules)"
    shown = run([python, "-c", probe], cwd=project, env=operator_env, capture=True).strip()
    if shown != "tenants False":
        raise CheckFailed(f"importing the tenants operator printed {shown!r}")
    print("import tenants: the operator module loads (and no RE2)")
    pytest_requirements = _extra("testing")
    run(
        [python, "-m", "pip", "install", "--quiet", "--no-compile", *pytest_requirements],
        cwd=work,
        env=env,
    )
    installed = {_normalized(r[0]) for r in installed_sizes(python, work, env)}
    if {_requirement_name(r) for r in _extra("tools")} & installed:
        raise CheckFailed(f"installing {pytest_requirements} brought in the tools extra")
    report = work / "runtime-unit.xml"
    units = sorted(
        str(p.relative_to(project))
        for p in (project / "tests").glob("test_unit_*.py")
        if p.name not in TOOLS_UNIT_TESTS
    )
    pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PYTEST_SETTINGS]
    run([*pytest, f"--junitxml={report}", *units], cwd=project, env=operator_env)
    cases = list(ET.parse(report).getroot().iter("testcase"))
    bad = [
        f"{c.get('classname')}::{c.get('name')}"
        for c in cases
        if any(c.find(tag) is not None for tag in ("failure", "error", "skipped"))
    ]
    if not cases or bad:
        raise CheckFailed(
            f"the tenants unit tests in the runtime-only install: {bad or 'none ran'}"
        )
    print(
        f"tenants unit tests: {len(cases)} passed with the runtime alone (+ "
        f"{', '.join(pytest_requirements)}; not {', '.join(TOOLS_UNIT_TESTS)}, which runs a tool)"
    )
    return project


def runtime_operator(
    steps: Steps,
    work: Path,
    *,
    tools_venv: Path,
    runtime_venv: Path,
    project: Path,
    env: dict[str, str],
) -> None:
    """The runtime-only install runs the tenants operator against a real control plane."""
    steps.step("the runtime alone runs the tenants operator on a control plane (tools start it)")
    driver = work / "release_check.py"
    shutil.copy(Path(__file__), driver)
    command = [
        tools_venv / "bin" / "python",
        driver,
        "--drive-operator",
        f"--runtime-venv={runtime_venv}",
        f"--project={project}",
    ]
    run(command, cwd=work, env=env)


def drive_operator(runtime_venv: Path, project: Path) -> int:
    """Step 8, run by the tools' virtualenv: a control plane, the CRD, one Tenant's life.

    The operator itself is ``<runtime-venv>/bin/setpoint run tenants``: the runtime alone.
    """
    import asyncio
    import signal

    import yaml

    import setpoint as sp
    from setpoint.testing import ControlPlane, ControlPlaneOptions, serving_certificate

    work = project.parent
    crds = [
        doc
        for doc in yaml.safe_load_all(
            (project / "config" / "crd" / "bases" / "tenants.setpoint.dev_tenants.yaml").read_text()
        )
        if doc
    ]
    tenant_kind = sp.GroupVersionKind("tenants.setpoint.dev", "v1", "Tenant")
    name, namespace = "release-check", "release-check-ns"
    log_path = work / "tenants-operator.log"

    processes: list[subprocess.Popen[bytes]] = []  # the operator, once started

    async def poll(what: str, check: Any, timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = await check()
            except sp.NotFound:
                value = None
            if value:
                return value
            ended = [p.returncode for p in processes if p.poll() is not None]
            if ended or time.monotonic() > deadline:
                why = f"the operator exited {ended[0]}" if ended else f"not within {timeout:.0f}s"
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
                raise CheckFailed(f"{what}: {why}; operator log:\n{tail}")
            await asyncio.sleep(0.25)

    async def life(kubeconfig: Path) -> None:
        async with sp.Client.from_kubeconfig(str(kubeconfig)) as client:

            async def served() -> bool:
                await client.list(tenant_kind)
                return True

            await poll("the Tenant kind served", served)
            await client.create(
                {
                    "apiVersion": tenant_kind.api_version,
                    "kind": "Tenant",
                    "metadata": {"name": name},
                    "spec": {"namespaces": [namespace], "adminGroup": "release-admins"},
                }
            )

            async def ready() -> bool:
                obj = await client.get(tenant_kind, name)
                status = obj.get("status") or {}
                return status.get("observedGeneration") == obj["metadata"]["generation"] and any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or []
                )

            started = time.monotonic()
            await poll(f"Tenant {name} Ready", ready)
            print(f"Tenant {name} Ready in {time.monotonic() - started:.1f}s")
            made = await client.get(sp.kinds.Namespace, namespace)
            labels = made["metadata"].get("labels") or {}
            if labels.get("tenants.setpoint.dev/tenant") != name:
                raise CheckFailed(f"namespace {namespace} lacks the tenant label: {labels}")
            print(f"namespace {namespace} made, labelled for {name}")
            await client.delete(tenant_kind, name)

            async def gone() -> bool:
                try:
                    await client.get(tenant_kind, name)
                except sp.NotFound:
                    return True
                return False

            await poll(f"Tenant {name} deleted (the operator's finalizer)", gone)
            print(f"Tenant {name} deleted through the operator's finalizer")

    with ControlPlane(ControlPlaneOptions(crds=crds)) as plane:
        cert_dir = work / "webhook-certs"
        serving_certificate(cert_dir)
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
        env.update(
            PATH=f"{runtime_venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            PYTHONPATH=str(project),
            KUBECONFIG=str(plane.kubeconfig_path),
            TENANTS_DIRECTORY_PATH=str(work / "tenants-directory.db"),
        )
        command = [
            str(runtime_venv / "bin" / "setpoint"),
            "run",
            "tenants",
            "--no-leader-elect",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--webhook-bind-address=127.0.0.1:0",
            f"--webhook-cert-dir={cert_dir}",
        ]
        print("$ " + " ".join(command), flush=True)
        # As the operator's image runs it: the package's parent directory is the working
        # directory and on PYTHONPATH (examples/tenants/Dockerfile).
        with log_path.open("wb") as log:
            operator = subprocess.Popen(
                command, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        processes.append(operator)
        try:
            asyncio.run(life(plane.kubeconfig_path))
        finally:
            if operator.poll() is None:
                operator.send_signal(signal.SIGTERM)
            try:
                code = operator.wait(timeout=60)
            except subprocess.TimeoutExpired:
                operator.kill()
                code = operator.wait(timeout=30)
        output = log_path.read_text(errors="replace")
        if code != 0 or "Traceback" in output:
            tail = "\n".join(output.splitlines()[-40:])
            raise CheckFailed(f"the operator exited {code} after SIGTERM; its log:\n{tail}")
        print("the operator stopped on SIGTERM with exit 0, no traceback in its log")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run every step; exit 1 with the failing step's reason."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--fresh-cache",
        action="store_true",
        help="build the control plane into an empty cache instead of reusing ~/.cache/setpoint",
    )
    parser.add_argument("--drive-operator", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runtime-venv", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--project", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive_operator:  # step 8, inside the tools' virtualenv (see runtime_operator)
        try:
            return drive_operator(args.runtime_venv, args.project)
        except CheckFailed as exc:
            print(f"release check: {exc}", file=sys.stderr)
            return 1
    steps = Steps()
    work = Path(tempfile.mkdtemp(prefix="setpoint-release-check-"))
    (work / "tmp").mkdir()
    print(f"release check in {work} (outside the checkout {ROOT})")
    if work.resolve().is_relative_to(ROOT):
        print("release check: the temporary directory is inside the checkout", file=sys.stderr)
        return 1
    try:
        sdist, wheel = build(steps, work)
        check_archives(steps, sdist, wheel)
        cache = work / "cache" if args.fresh_cache else None
        env = clean_env(work, work / "venv", cache)
        venv = install(steps, work, wheel, env)
        cli(steps, work, venv, env)
        control_plane(steps, work, venv, env)
        operator_tests(steps, work, venv, env)
        runtime_env = clean_env(work, work / "runtime-venv", cache)
        runtime_venv = runtime_install(steps, work, wheel, runtime_env)
        project = runtime_checks(steps, work, runtime_venv, runtime_env)
        runtime_operator(
            steps, work, tools_venv=venv, runtime_venv=runtime_venv, project=project, env=env
        )
    except CheckFailed as exc:
        print(f"\nrelease check FAILED after {steps.total():.0f}s: {exc}", file=sys.stderr)
        print(f"(kept {work})", file=sys.stderr)
        return 1
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nrelease check passed in {steps.total():.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
