"""The container engine and the Lambda-compatible image `sam local` runs the functions in.

Usage: python scripts/sam_image.py [--print-name]   (what `make sam-image` runs)

`sam local` runs each function in a container made from AWS's Lambda base image
(public.ecr.aws/lambda/python:3.13), pulled from a registry. Where no registry is reachable
(these machines: only Debian's mirror and the package index), this builds an equivalent image
from those two sources instead, once, cached under a tag that names its recipe:

* a Debian trixie root file system (`debootstrap --variant=minbase`; its python3 is 3.13, the
  template's runtime), for the host's architecture (ADR 0028 says why not the template's arm64);
* AWS's Lambda runtime interface client (`awslambdaric`, from the package index, the cp313
  wheel) in /var/runtime, and a /var/runtime/bootstrap that starts it with the handler SAM
  names, with the layer (/opt/python) and the code (/var/task) on the path as on Lambda.

SAM mounts its own runtime interface emulator into the container and runs that bootstrap, as
it does with AWS's image: `sam local invoke FN --invoke-image IMAGE --skip-pull-image`. With
Docker and the internet, leave both flags out and SAM pulls AWS's image instead.

The engine: if Docker's daemon does not answer and this runs as root, Debian's `docker.io` is
installed when missing and `dockerd` started (`ensure_engine`); whoever started it stops it
(`Engine.stop_if_started`), so a machine is left as it was found. Not root: it says what is
missing and stops.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DEBIAN_SUITE = "trixie"  # python3 3.13, the template's Runtime (python3.13)
AWSLAMBDARIC_VERSION = "4.2.2"
IMAGE_REPOSITORY = "durable-agents-lambda-python3.13"
ENGINE_LOG = Path(tempfile.gettempdir()) / "durable-agents-dockerd.log"
ENGINE_START_SECONDS = 60

# The bootstrap Lambda's managed python3.13 runtime has, reduced to what a handler sees: the
# runtime interface client, given the handler SAM passes in _HANDLER.
BOOTSTRAP = """#!/bin/sh
# Starts AWS's Lambda runtime interface client with the function's handler (image built by
# durable-agents' scripts/sam_image.py; SAM's runtime interface emulator runs this).
export PYTHONPATH=/var/runtime:/var/task:/opt/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
exec /usr/bin/python3 -m awslambdaric "$_HANDLER"
"""

# What `docker import` records: Lambda's variables the handler code and the client rely on.
IMAGE_CHANGES = (
    "ENV LAMBDA_TASK_ROOT=/var/task",
    "ENV LAMBDA_RUNTIME_DIR=/var/runtime",
    "ENV LANG=C.UTF-8",
    "ENV TZ=:/etc/localtime",
    "WORKDIR /var/task",
)


class SetupError(Exception):
    """Something the image or the engine needs is missing; the message says what to do."""


def machine_architecture() -> str:
    """The host's architecture as Lambda names it (``x86_64`` or ``arm64``).

    Raises:
        SetupError: On an architecture Lambda does not run.
    """
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "x86_64"
    if machine in ("aarch64", "arm64"):
        return "arm64"
    raise SetupError(f"Lambda runs x86_64 and arm64 functions; this machine is {machine}")


def debian_architecture(architecture: str) -> str:
    """Debian's name of a Lambda architecture."""
    return {"x86_64": "amd64", "arm64": "arm64"}[architecture]


def wheel_platforms(architecture: str) -> list[str]:
    """The manylinux tags pip may install for ``architecture`` (glibc of Debian trixie)."""
    arch = "x86_64" if architecture == "x86_64" else "aarch64"
    return [f"manylinux_2_17_{arch}", f"manylinux2014_{arch}"]


def image_name(architecture: str | None = None) -> str:
    """The image's tag: changes whenever what it is built from changes (so it is rebuilt)."""
    architecture = architecture or machine_architecture()
    recipe = "\n".join(
        [DEBIAN_SUITE, AWSLAMBDARIC_VERSION, architecture, BOOTSTRAP, *IMAGE_CHANGES]
    )
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    return f"{IMAGE_REPOSITORY}:{architecture}-{digest}"


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=False, text=True, capture_output=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def engine_answers() -> bool:
    """Whether a Docker client is installed and its daemon answers."""
    if shutil.which("docker") is None:
        return False
    try:
        return (
            _run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=20).returncode == 0
        )
    except subprocess.TimeoutExpired:
        return False


@dataclass
class Engine:
    """Docker's daemon, and whether this process started it (then it stops it too).

    Attributes:
        started: The ``dockerd`` this process started, or None if it was running already.
    """

    started: subprocess.Popen[bytes] | None = None

    def stop_if_started(self) -> None:
        """Stops the daemon if this process started it (containers were removed before)."""
        if self.started is None or self.started.poll() is not None:
            return
        self.started.terminate()
        try:
            self.started.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.started.kill()
            self.started.wait(timeout=10)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _apt_install(packages: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"==> installing {' '.join(packages)} (apt)", flush=True)
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        done = _run(command, env=env)
        if done.returncode != 0:
            raise SetupError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")


def ensure_engine() -> Engine:
    """Makes Docker's daemon answer: as root, installs and starts it where needed.

    Returns:
        The engine; ``stop_if_started`` puts things back as they were.

    Raises:
        SetupError: If the daemon does not answer and cannot be started here (not root, or
            it does not come up within a minute); the message says what to do.
    """
    if engine_answers():
        return Engine()
    if not _is_root():
        missing = "the Docker client" if shutil.which("docker") is None else "Docker's daemon"
        raise SetupError(
            f"{missing} is not available: install Docker (or Debian's docker.io) and start "
            "it (sudo systemctl start docker), or run this as root to let it do both"
        )
    if shutil.which("dockerd") is None:
        _apt_install(["docker.io"])
    print(f"==> starting dockerd (log: {ENGINE_LOG})", flush=True)
    with open(ENGINE_LOG, "ab") as log:
        daemon = subprocess.Popen(
            ["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    engine = Engine(started=daemon)
    deadline = time.monotonic() + ENGINE_START_SECONDS
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SetupError(f"dockerd exited ({daemon.returncode}); see {ENGINE_LOG}")
        if engine_answers():
            return engine
        time.sleep(0.5)
    engine.stop_if_started()
    raise SetupError(f"dockerd did not answer within {ENGINE_START_SECONDS} s; see {ENGINE_LOG}")


def image_exists(name: str) -> bool:
    """Whether the engine has the image ``name``."""
    return _run(["docker", "image", "inspect", name]).returncode == 0


def build_image(name: str, architecture: str, python: str = sys.executable) -> None:
    """Builds the image from Debian's packages and the package index, and imports it.

    Args:
        name: The tag (``image_name``).
        architecture: ``x86_64`` or ``arm64`` (must be the host's: debootstrap runs its
            second stage here).
        python: A Python with pip, to fetch the client's cp313 wheel for ``architecture``.

    Raises:
        SetupError: If something it needs is missing or a step fails.
    """
    if not _is_root():
        raise SetupError(
            "building the image needs root (debootstrap makes a root file system); run "
            "`sudo make sam-image`, or use AWS's images: leave out --invoke-image"
        )
    if shutil.which("debootstrap") is None:
        _apt_install(["debootstrap"])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="durable-agents-image-") as scratch:
        root = Path(scratch) / "rootfs"
        print(f"==> debootstrap {DEBIAN_SUITE} ({debian_architecture(architecture)})", flush=True)
        done = _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--arch={debian_architecture(architecture)}",
                "--include=python3,ca-certificates",
                DEBIAN_SUITE,
                str(root),
            ]
        )
        if done.returncode != 0:
            raise SetupError(f"debootstrap failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        runtime = root / "var" / "runtime"
        print(f"==> awslambdaric {AWSLAMBDARIC_VERSION} into /var/runtime", flush=True)
        platforms = [arg for tag in wheel_platforms(architecture) for arg in ("--platform", tag)]
        done = _run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
                str(runtime),
                "--python-version",
                "3.13",
                "--implementation",
                "cp",
                "--only-binary=:all:",
                *platforms,
                f"awslambdaric=={AWSLAMBDARIC_VERSION}",
            ]
        )
        if done.returncode != 0:
            raise SetupError(f"pip could not install awslambdaric:\n{done.stderr[-2000:]}")
        bootstrap = runtime / "bootstrap"
        bootstrap.write_text(BOOTSTRAP, encoding="utf-8")
        bootstrap.chmod(0o755)
        for directory in ("var/task", "opt"):
            (root / directory).mkdir(parents=True, exist_ok=True)
        # Space the image does not need (apt's lists and caches, documentation).
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc"):
            shutil.rmtree(root / cache, ignore_errors=True)
        print(f"==> docker import {name}", flush=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        changes = [arg for change in IMAGE_CHANGES for arg in ("--change", change)]
        imported = subprocess.run(
            ["docker", "import", *changes, "-", name],
            stdin=tar.stdout,
            check=False,
            capture_output=True,
            text=True,
        )
        if tar.stdout is not None:
            tar.stdout.close()
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise SetupError(f"docker import failed:\n{imported.stderr[-2000:]}")
    print(f"==> built {name} in {time.monotonic() - started:.0f} s", flush=True)


def ensure_image(architecture: str | None = None) -> str:
    """The image's tag, built first if the engine does not have it (the engine must answer).

    Raises:
        SetupError: If it has to be built and cannot be.
    """
    architecture = architecture or machine_architecture()
    name = image_name(architecture)
    if image_exists(name):
        return name
    build_image(name, architecture)
    return name


def main(argv: list[str] | None = None) -> int:
    """Entry point of `make sam-image`: the engine up, the image built (or found)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print-name", action="store_true", help="print the image's tag only")
    args = parser.parse_args(argv)
    if args.print_name:
        print(image_name())
        return 0
    try:
        engine = ensure_engine()
        try:
            name = ensure_image()
        finally:
            engine.stop_if_started()
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"==> image ready: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
