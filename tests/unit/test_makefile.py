"""``make demo`` on a fresh clone says what it is doing while it installs the virtualenv.

The recipe is run for real with a stand-in interpreter that behaves like ``python -m venv``
and ``pip install`` (it prints pip's lines unless ``--quiet`` is given), so no package is
downloaded.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """#!/bin/sh
case "$*" in
  *"-m venv"*) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
  *"-m pip"*)
    case "$*" in *--quiet*) exit 0 ;; esac
    echo "Obtaining file:///work"
    echo "Collecting boto3 (from durable-agents==0.1.0)"
    echo "  Downloading boto3-1.40.0-py3-none-any.whl (139 kB)"
    echo "Collecting moto[server] (from durable-agents==0.1.0)"
    echo "Requirement already satisfied: pip in ./v/lib"
    echo "Installing collected packages: boto3, moto, durable-agents"
    echo "Successfully installed boto3-1.40.0 moto-5.1.0 durable-agents-0.1.0"
    ;;
  *) exit 0 ;;
esac
"""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_virtualenv_install_reports_its_progress(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    venv = tmp_path / "v"
    done = subprocess.run(
        ["make", f"VENV={venv}", f"PYTHON={fake}", f"{venv}/.installed"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "downloads and installs" in out  # says what it does and that it takes a while
    assert "Collecting boto3" in out and "Collecting moto[server]" in out
    assert "Successfully installed" in out
    assert "Requirement already satisfied" not in out  # the noise stays out
