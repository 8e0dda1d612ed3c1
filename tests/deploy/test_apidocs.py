"""`make apidocs`: the API reference of the library an application imports (`sidecar.serde`,
`sidecar.codec`), built by pdoc from the installed package, into a directory the repository
ignores; and the package marks itself typed (PEP 561), so those hints reach the application's
type checker."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import sidecar
from tests.deploy.kustomize import ROOT


def test_make_apidocs_writes_the_reference_of_serde_and_codec(tmp_path: Path) -> None:
    make = shutil.which("make")
    assert make, "make is not installed"
    out = tmp_path / "out"
    result = subprocess.run(
        [
            make,
            "--no-print-directory",
            "-C",
            str(ROOT),
            "-o",
            ".venv/.installed-stamp",  # the running interpreter's install, as it is
            f"BIN={Path(sys.executable).parent}",
            f"OUT={out}",
            "apidocs",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    serde = (out / "apidocs" / "sidecar" / "serde.html").read_text(encoding="utf-8")
    codec = (out / "apidocs" / "sidecar" / "codec.html").read_text(encoding="utf-8")
    assert "ZdictSerializer" in serde and "ZdictProducer" in serde
    assert "Encoder" in codec and "Decoder" in codec


def test_the_api_reference_goes_where_git_ignores_it() -> None:
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "out/apidocs/sidecar/serde.html"],
        check=False,
    )
    assert ignored.returncode == 0, "out/apidocs is not ignored by .gitignore"


def test_the_package_ships_its_type_hints() -> None:
    assert (Path(sidecar.__file__).parent / "py.typed").is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["sidecar"]
