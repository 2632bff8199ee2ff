"""Sizes of what `sam build` produced: each function's package and each layer, unzipped and zipped.

Usage: python scripts/package_sizes.py [BUILD_DIR] [--top N]

BUILD_DIR defaults to .aws-sam/build. "Unzipped" is the sum of the file sizes (what counts
against Lambda's 250 MB limit); "zipped" is the size of the zip `sam deploy` would upload,
made the same way (zipfile, ZIP_DEFLATED, every file under the artifact directory).
--top N also lists each artifact's N largest top-level entries (for a layer, under python/).
"""

from __future__ import annotations

import argparse
import io
import os
import zipfile
from pathlib import Path


def tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def zipped_size(directory: Path) -> int:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for root, dirs, files in os.walk(directory):
            dirs.sort()
            for name in sorted(files):
                full = Path(root, name)
                archive.write(full, full.relative_to(directory))
    return buffer.tell()


def mb(size: int) -> str:
    if size < 1_000_000:
        return f"{size / 1_000:.1f} kB"
    return f"{size / 1_000_000:.2f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", nargs="?", default=".aws-sam/build", type=Path)
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    artifacts = sorted(p for p in args.build_dir.iterdir() if p.is_dir())
    print("| Artifact | Files | Unzipped | Zipped |")
    print("|---|---:|---:|---:|")
    for artifact in artifacts:
        files = sum(1 for p in artifact.rglob("*") if p.is_file())
        print(
            f"| `{artifact.name}` | {files} | {mb(tree_size(artifact))} "
            f"| {mb(zipped_size(artifact))} |"
        )
    if args.top:
        for artifact in artifacts:
            base = artifact / "python" if (artifact / "python").is_dir() else artifact
            entries = sorted(base.iterdir(), key=tree_size, reverse=True)[: args.top]
            listing = ", ".join(f"{e.name} {mb(tree_size(e))}" for e in entries)
            print(f"\n{artifact.name}: {listing}")


if __name__ == "__main__":
    main()
