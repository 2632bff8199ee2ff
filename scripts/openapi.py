"""Writes docs/openapi.json, the Api's OpenAPI document (`make openapi`); --check: is it current?

The document is what `GET /openapi.json` serves: Powertools' generator over the Api's routes,
completed by functions/api/openapi.py from the routes' request models.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "openapi.json"
for path in (ROOT / "functions", ROOT / "layers" / "runtime"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def current() -> str:
    from api.app import app
    from api.openapi import document_json

    return document_json(app)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/openapi.json is stale")
    args = parser.parse_args()
    text = current()
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run `make openapi`", file=sys.stderr)
            return 1
        print(f"{TARGET.relative_to(ROOT)} is current")
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
