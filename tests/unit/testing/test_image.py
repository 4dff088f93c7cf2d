"""setpoint.testing.image: the image's layers, config, cache and errors, without root."""

from __future__ import annotations

import gzip
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from setpoint.cli.main import main
from setpoint.testing import image
from setpoint.testing.image import (
    IMAGE_USER,
    ImageError,
    apt_mirror,
    base_layer,
    build_image,
    find_module,
)
from setpoint.testing.nodes import _layer, oci_layer, write_oci_archive

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _read_archive(path: Path) -> tuple[dict[str, Any], dict[str, Any], list[bytes]]:
    """The archive's manifest, image config and layer tars (uncompressed), bottom first."""
    with tarfile.open(path) as tar:

        def blob(digest: str) -> bytes:
            member = tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
            assert member is not None
            return member.read()

        index_file = tar.extractfile("index.json")
        assert index_file is not None
        index = json.load(index_file)
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layers = [gzip.decompress(blob(layer["digest"])) for layer in manifest["layers"]]
    return manifest, config, layers


def _names(layer: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        return {info.name: info for info in tar.getmembers()}


@pytest.fixture
def cached_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """A tiny base layer put in the cache where base_layer looks for it."""
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path / "cache"))
    mirror = "http://mirror.invalid/debian"
    key = image._base_key(image.SUITE, mirror, image.BASE_PACKAGES)
    home = tmp_path / "cache" / "images" / f"base-{image.SUITE}-{key}"
    home.mkdir(parents=True)
    tar = _layer({"usr": (None, 0o755, None), "usr/bin/marker": (b"base", 0o644, None)})
    layer = oci_layer(tar)
    (home / "layer.tar.gz").write_bytes(layer.blob)
    (home / "base.json").write_text(json.dumps({"python": PYTHON, "diff_id": layer.diff_id}))
    monkeypatch.setattr(image, "apt_mirror", lambda: mirror)
    return tar


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "widgets").mkdir(parents=True)
    (project / "widgets" / "__init__.py").write_text("VALUE = 1\n")
    (project / "tests").mkdir()
    (project / "tests" / "__init__.py").write_text("")
    return project


def test_write_oci_archive_keeps_several_layers_in_order(tmp_path: Path) -> None:
    lower = _layer({"a": (b"1", 0o644, None)})
    upper = _layer({"b": (b"2", 0o644, None)})
    archive = tmp_path / "x.oci.tar"
    write_oci_archive(archive, "x:y", [oci_layer(lower), oci_layer(upper)], {"User": "1"})
    manifest, config, layers = _read_archive(archive)
    assert layers == [lower, upper]
    assert len(manifest["layers"]) == 2
    assert config["rootfs"]["diff_ids"] == [oci_layer(lower).diff_id, oci_layer(upper).diff_id]


def test_an_image_is_the_cached_base_and_a_layer_with_the_venv_and_the_operator(
    tmp_path: Path, cached_base: bytes
) -> None:
    out = tmp_path / "out" / "widgets.oci.tar"
    lines: list[str] = []
    result = build_image(out, project=_project(tmp_path), requirements=[], progress=lines.append)
    assert result.base_cached
    assert result.ref == "docker.io/library/widgets-operator:latest"
    _, config, layers = _read_archive(out)
    assert layers[0] == cached_base
    assert len(layers) == 2
    files = _names(layers[1])
    assert "app/widgets/__init__.py" in files
    assert any(name.startswith("app/widgets/__pycache__/") for name in files), files
    assert files["opt/venv/bin/python"].linkname == f"/usr/bin/python{PYTHON}"
    assert f"opt/venv/lib/python{PYTHON}/site-packages" in files
    assert files["opt/venv/bin/setpoint"].mode & 0o111
    assert all(info.uid == 0 and info.gid == 0 for info in files.values())
    assert "tests" not in {name.split("/")[1] for name in files if name.startswith("app/")}
    cfg = config["config"]
    assert cfg["Entrypoint"] == ["/opt/venv/bin/setpoint", "run", "widgets"]
    assert cfg["User"] == IMAGE_USER == "65532:65532"
    assert "PYTHONPATH=/app" in cfg["Env"]
    assert "PYTHONDONTWRITEBYTECODE=1" in cfg["Env"]
    assert any("from the cache" in line for line in lines)


def test_a_base_not_cached_needs_debootstrap_and_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("setpoint.testing.image.shutil.which", lambda name: None)
    with pytest.raises(ImageError, match="apt-get install debootstrap"):
        base_layer(mirror="http://mirror.invalid/debian")
    monkeypatch.setattr("setpoint.testing.image.shutil.which", lambda name: "/usr/sbin/x")
    monkeypatch.setattr("setpoint.testing.image.os.geteuid", lambda: 1000)
    with pytest.raises(ImageError, match="needs root once"):
        base_layer(mirror="http://mirror.invalid/debian")
    assert not (tmp_path / "images").exists() or not any((tmp_path / "images").iterdir())


def test_a_failing_debootstrap_names_its_last_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    fake = tmp_path / "debootstrap"
    fake.write_text("#!/bin/sh\necho 'E: Failed getting release file'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr("setpoint.testing.image.os.geteuid", lambda: 0)
    with pytest.raises(ImageError, match=r"(?s)debootstrap failed.*Failed getting release file"):
        base_layer(mirror="http://mirror.invalid/debian", progress=lambda line: None)
    assert [p.name for p in (tmp_path / "images").iterdir()] == []


def test_a_python_other_than_the_bases_is_refused(
    tmp_path: Path, cached_base: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image, "_running_python", lambda: "3.99")
    with pytest.raises(ImageError, match=f"base's Python is {PYTHON} and this is 3.99"):
        build_image(tmp_path / "x.tar", project=_project(tmp_path), requirements=[], progress=print)
    assert not (tmp_path / "x.tar").exists()


def test_the_module_is_the_projects_only_package_or_named(tmp_path: Path) -> None:
    project = _project(tmp_path)
    assert find_module(project) == "widgets"
    (project / "gadgets").mkdir()
    (project / "gadgets" / "__init__.py").write_text("")
    with pytest.raises(ImageError, match="pass --module"):
        find_module(project)


def test_the_mirror_is_aptss_first_non_security_uri(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n"
    )
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"
    assert apt_mirror(tmp_path / "none") == "http://deb.debian.org/debian"
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "sources.list").write_text(
        "deb [signed-by=/k.gpg] http://old.example/debian bookworm main\n"
    )
    assert apt_mirror(tmp_path / "old") == "http://old.example/debian"


def test_the_cli_builds_and_reports_a_bad_project_in_one_line(
    tmp_path: Path, cached_base: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["image", "build", "--project", str(empty), "--output", "x.tar"]) == 1
    assert "pass --module" in capsys.readouterr().err


class _Dist:
    version = "1.2.3"

    def __init__(self, direct: str | None) -> None:
        self.direct = direct

    def read_text(self, name: str) -> str | None:
        return self.direct if name == "direct_url.json" else None


def test_setpoint_comes_from_its_checkout_else_from_its_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checkout = json.dumps({"url": "file:///src/set%20point", "dir_info": {"editable": True}})
    monkeypatch.setattr("importlib.metadata.distribution", lambda name: _Dist(checkout))
    assert image.setpoint_requirement() == "/src/set point"
    monkeypatch.setattr("importlib.metadata.distribution", lambda name: _Dist(None))
    assert image.setpoint_requirement() == "setpoint==1.2.3"


def test_a_short_image_name_is_stored_under_the_name_the_kubelet_asks_for() -> None:
    assert image.normalized_ref("tenants-operator:latest") == (
        "docker.io/library/tenants-operator:latest"
    )
    assert image.normalized_ref("team/op:v1") == "docker.io/team/op:v1"
    assert image.normalized_ref("localhost/x/op:v1") == "localhost/x/op:v1"
    assert image.normalized_ref("registry.example.com/op:v1") == "registry.example.com/op:v1"
    assert image.normalized_ref("host:5000/op:v1") == "host:5000/op:v1"
