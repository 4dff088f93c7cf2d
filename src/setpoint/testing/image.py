"""An operator's OCI image, built here: no registry, no Docker, no base image pulled.

``setpoint image build`` (and ``make docker-build``) writes an OCI archive that
``setpoint controlplane load-image`` loads into the local nodes (or ``skopeo copy
oci-archive:... docker://...`` pushes anywhere). Two layers:

1. **The base**: a Debian root filesystem from the distribution's packages
   (``debootstrap --variant=minbase`` of :data:`SUITE` with :data:`BASE_PACKAGES`, from the
   mirror apt uses), with apt's caches, documentation and locales removed. It is built
   once, as root, and cached under ``~/.cache/setpoint/images/`` keyed by suite, mirror and
   package list; a rebuild reuses the compressed layer as it is.
2. **The operator**: a virtualenv at ``/opt/venv`` whose interpreter is the base's
   ``/usr/bin/python3``, filled by pip (run by this Python, which must be the base's minor
   version: pip installs wheels for the interpreter that runs it) with setpoint, the
   operator's project when it has a ``pyproject.toml`` (its wheel and dependencies), else
   the operator's package copied to ``/app``. Byte code is compiled at build time, so the
   image runs with a read-only root filesystem and ``PYTHONDONTWRITEBYTECODE=1``.

The image runs as uid/gid 65532 with ``HOME=/tmp``; its entrypoint is
``setpoint run <module>``. Decision 0021 ("Status of the plan") and docs/controlplane.md
("Build an image") record the choices and the times.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from setpoint.testing.controlplane import ControlPlaneError, cache_dir
from setpoint.testing.nodes import OciLayer, oci_layer, write_oci_archive

__all__ = [
    "BASE_PACKAGES",
    "IMAGE_USER",
    "SUITE",
    "ImageError",
    "ImageResult",
    "apt_mirror",
    "base_layer",
    "build_image",
    "find_module",
    "image_config",
    "normalized_ref",
    "setpoint_requirement",
]

SUITE = "bookworm"
"""The Debian release the base root filesystem is built from (the machine's own)."""

BASE_PACKAGES: tuple[str, ...] = ("python3",)
"""Packages ``debootstrap --include`` adds to ``minbase``: the operator needs only Python."""

IMAGE_USER = "65532:65532"
"""The image's user (uid:gid), the generated Deployment's ``runAsUser``: never root."""

VENV = "/opt/venv"
"""Where the operator's virtualenv lives in the image."""

_PRUNE = (
    "var/cache/apt",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/log",
    "var/cache/debconf/templates.dat-old",
)
"""Paths emptied in the base: caches, documentation, locales (nothing the operator reads)."""

Progress = Callable[[str], None]


class ImageError(ControlPlaneError):
    """The image could not be built: the message names the cause and what to do."""


@dataclass(frozen=True, slots=True)
class ImageResult:
    """What :func:`build_image` wrote, and how long its steps took (seconds)."""

    archive: Path
    """The OCI archive."""
    ref: str
    """The image name inside it (``ctr images ls`` shows it after ``load-image``)."""
    base_cached: bool
    """True when the base layer came from the cache."""
    base_seconds: float
    """Time spent on the base layer (build, or read from the cache)."""
    app_seconds: float
    """Time spent on the operator's layer (pip, tar, gzip) and writing the archive."""
    size: int
    """The archive's size in bytes."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def apt_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt uses here (first ``URIs:``/``deb`` line), else deb.debian.org."""
    files = [*sorted(sources.glob("sources.list.d/*.sources")), sources / "sources.list"]
    files += sorted(sources.glob("sources.list.d/*.list"))
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "URIs:" and "security" not in words[1]:
                return words[1]
            if len(words) >= 3 and words[0] == "deb" and "security" not in words[1]:
                return words[1] if not words[1].startswith("[") else words[2]
    return "http://deb.debian.org/debian"


def _running_python() -> str:
    """The running interpreter's ``major.minor``: pip installs wheels for it."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def _base_key(suite: str, mirror: str, packages: Sequence[str]) -> str:
    spec = json.dumps({"suite": suite, "mirror": mirror, "packages": sorted(packages)})
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def _run_streamed(argv: Sequence[str], progress: Progress, what: str) -> None:
    """Run ``argv``, passing its output lines to ``progress``; raise ImageError on failure."""
    tail: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = [*tail[-19:], line.rstrip()]
            progress(f"  {line.rstrip()}")
    if proc.returncode != 0:
        raise ImageError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def base_layer(
    *,
    suite: str = SUITE,
    packages: Sequence[str] = BASE_PACKAGES,
    mirror: str | None = None,
    progress: Progress = _stderr,
) -> tuple[OciLayer, str, bool]:
    """The base root filesystem's layer, its Python version (``3.11``), and if it was cached.

    Built with ``debootstrap --variant=minbase --include=<packages>`` (as root) into a
    temporary directory under the cache, pruned, packed with numeric owners and without
    ``/dev``'s nodes, compressed, and kept as ``images/base-<suite>-<key>/``; the directory
    itself is removed.

    Raises:
        ImageError: not root, debootstrap missing, or debootstrap failed (its last lines).

    """
    mirror = mirror or apt_mirror()
    home = cache_dir() / "images" / f"base-{suite}-{_base_key(suite, mirror, packages)}"
    meta_path = home / "base.json"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        progress(f"image: base {suite} ({', '.join(packages)}) from the cache: {home}")
        return OciLayer((home / "layer.tar.gz").read_bytes(), meta["diff_id"]), meta["python"], True
    if shutil.which("debootstrap") is None:
        raise ImageError(
            "the image's base is built with debootstrap, which is not installed: "
            "`apt-get install debootstrap` (or `make cluster-deps`)"
        )
    if os.geteuid() != 0:
        raise ImageError(
            f"building the image's base (debootstrap) needs root once; it is then cached in "
            f"{home.parent}: run this build as root"
        )
    home.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="base-", dir=home.parent) as tmp:
        root = Path(tmp) / "rootfs"
        progress(f"image: debootstrap {suite} minbase + {', '.join(packages)} from {mirror}")
        _run_streamed(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(packages)}",
                suite,
                str(root),
                mirror,
            ],
            progress,
            "debootstrap",
        )
        for rel in _PRUNE:
            target = root / rel
            if target.is_dir():
                for child in target.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
            elif target.exists():
                target.unlink()
        pythons = sorted(p.name for p in (root / "usr/bin").glob("python3.*") if p.is_file())
        if not pythons:
            raise ImageError(f"the base has no usr/bin/python3.X: packages {list(packages)}")
        python = pythons[0].removeprefix("python")
        progress("image: packing the base layer")
        tar_path = Path(tmp) / "layer.tar"
        subprocess.run(
            [
                "tar",
                "--numeric-owner",
                "--sort=name",
                "--exclude=./dev/*",
                "--exclude=./proc/*",
                "--exclude=./sys/*",
                "-C",
                str(root),
                "-cf",
                str(tar_path),
                ".",
            ],
            check=True,
        )
        layer = oci_layer(tar_path.read_bytes(), compresslevel=6)
        staged = Path(tmp) / "out"
        staged.mkdir()
        (staged / "layer.tar.gz").write_bytes(layer.blob)
        (staged / "base.json").write_text(
            json.dumps(
                {
                    "suite": suite,
                    "mirror": mirror,
                    "packages": list(packages),
                    "python": python,
                    "diff_id": layer.diff_id,
                }
            )
        )
        if home.exists():
            shutil.rmtree(home)
        staged.replace(home)
    return layer, python, False


def setpoint_requirement() -> str:
    """What pip installs as setpoint in the image: the checkout it runs from, else its release.

    An editable or directory install (``pip install -e .`` in a checkout) records the
    directory (PEP 610 ``direct_url.json``): the image gets a wheel built from it, so the
    image runs the setpoint the build ran; an install from a local wheel file gets that
    file. Otherwise ``setpoint==<installed version>``.
    """
    dist = metadata.distribution("setpoint")
    direct = dist.read_text("direct_url.json")
    if direct:
        info = json.loads(direct)
        url = info.get("url", "")
        if url.startswith("file://") and ("dir_info" in info or "archive_info" in info):
            return unquote(urlparse(url).path)  # a checkout, or the wheel file installed
    return f"setpoint=={dist.version}"


def normalized_ref(ref: str) -> str:
    """The image name as the kubelet asks containerd for it (docker's normalization).

    ``tenants-operator:latest`` is ``docker.io/library/tenants-operator:latest``: a Pod's
    ``image: tenants-operator:latest`` is looked up under the long name, so the archive
    carries that one; a name with a registry (``localhost/x``, ``a.io/x``) stays.
    """
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if rest else f"docker.io/library/{ref}"


def find_module(project: Path) -> str:
    """The operator's package in ``project``: the only directory with an ``__init__.py``.

    Raises:
        ImageError: none or several (pass ``--module``).

    """
    found = sorted(
        p.name
        for p in project.iterdir()
        if (p / "__init__.py").is_file() and p.name not in {"tests", "test"}
    )
    if len(found) != 1:
        raise ImageError(
            f"{project}: cannot tell the operator's package ({found or 'none found'}): "
            "pass --module NAME"
        )
    return found[0]


def image_config(module: str, *, app: bool) -> dict[str, object]:
    """The OCI image config's ``config``: entrypoint, user, environment."""
    env = [
        f"PATH={VENV}/bin:/usr/local/bin:/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        "HOME=/tmp",
    ]
    if app:
        env.append("PYTHONPATH=/app")
    return {
        "Entrypoint": [f"{VENV}/bin/setpoint", "run", module],
        "User": IMAGE_USER,
        "Env": env,
        "WorkingDir": "/app" if app else "/",
        "ExposedPorts": {"8081/tcp": {}, "8443/tcp": {}, "9443/tcp": {}},
    }


_LAUNCHER = """#!{venv}/bin/python
import sys

from setpoint.cli.main import main

sys.exit(main())
"""


def _pip_install(site: Path, specs: Sequence[str]) -> None:
    """Install ``specs`` and their dependencies into ``site`` with this Python's pip."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(site),
            *specs,
        ],
        check=True,
    )


def _app_layer(
    stage: Path, project: Path, module: str, python: str, requirements: Sequence[str]
) -> tuple[bytes, bool]:
    """Fill ``stage`` with the venv (and /app) and return its layer tar and if /app is used."""
    venv = stage / VENV.lstrip("/")
    site = venv / "lib" / f"python{python}" / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    for name in ("python", "python3", f"python{python}"):
        (venv / "bin" / name).symlink_to(f"/usr/bin/python{python}")
    (venv / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {python}\n"
    )
    launcher = venv / "bin" / "setpoint"
    launcher.write_text(_LAUNCHER.format(venv=VENV))
    launcher.chmod(0o755)
    app = not (project / "pyproject.toml").is_file()
    specs = [*requirements] if app else [*requirements, str(project)]
    if specs:
        _pip_install(site, specs)
    shutil.rmtree(site / "bin", ignore_errors=True)  # scripts pip wrote for this Python
    if app:
        source = project / module
        if not (source / "__init__.py").is_file():
            raise ImageError(f"{source}: no package {module!r} there (pass --module)")
        shutil.copytree(
            source, stage / "app" / module, ignore=shutil.ignore_patterns("__pycache__")
        )
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(stage / "app")], check=True)

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for top in sorted(stage.iterdir()):
            tar.add(top, arcname=top.name, filter=owned_by_root)
    return buf.getvalue(), app


def build_image(
    output: Path,
    *,
    project: Path,
    module: str | None = None,
    ref: str | None = None,
    requirements: Sequence[str] | None = None,
    base_packages: Sequence[str] = BASE_PACKAGES,
    mirror: str | None = None,
    progress: Progress = _stderr,
    clock: Callable[[], float] = time.monotonic,
) -> ImageResult:
    """Build the operator's image from ``project`` and write it to ``output`` (OCI archive).

    ``module`` is what ``setpoint run`` runs (default: the project's only package);
    ``ref`` the image name (default ``<module>-operator:latest``, as the examples'
    Deployments name it); ``requirements`` what pip installs besides the project
    (default: :func:`setpoint_requirement`). The first build of a base needs root and the
    network (the Debian mirror); every build needs pip's index for the dependencies.

    Raises:
        ImageError: see :func:`base_layer`; the Python running this is not the base's
            version; the module is not found; pip failed.

    """
    project = project.resolve()
    module = module or find_module(project)
    ref = normalized_ref(ref or f"{module}-operator:latest")
    started = clock()
    base, python, cached = base_layer(packages=base_packages, mirror=mirror, progress=progress)
    base_seconds = clock() - started
    running = _running_python()
    if running != python:
        raise ImageError(
            f"the base's Python is {python} and this is {running}: pip installs wheels for "
            f"the interpreter that runs it, so run the build with a Python {python}"
        )
    started = clock()
    reqs = list(requirements) if requirements is not None else [setpoint_requirement()]
    progress(f"image: pip install {' '.join(reqs)} and the operator from {project}")
    with tempfile.TemporaryDirectory(prefix="setpoint-image-") as tmp:
        try:
            layer_tar, app = _app_layer(Path(tmp), project, module, python, reqs)
        except subprocess.CalledProcessError as err:
            raise ImageError(f"pip could not install the operator: {err}") from err
    progress(f"image: writing {output} ({ref})")
    output.parent.mkdir(parents=True, exist_ok=True)
    write_oci_archive(
        output,
        ref,
        [base, oci_layer(layer_tar, compresslevel=6)],
        image_config(module, app=app),
    )
    app_seconds = clock() - started
    result = ImageResult(output, ref, cached, base_seconds, app_seconds, output.stat().st_size)
    progress(
        f"image: {ref} -> {output}: {result.size / 2**20:.1f} MiB; base "
        f"{'cached' if cached else 'built'} {base_seconds:.1f} s, operator {app_seconds:.1f} s"
    )
    return result
