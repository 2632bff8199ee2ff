"""Runs the fake services until SIGTERM: ``python -m durable_agents_local.services --port P``.

Prints the bound base URL (one line on stdout) once it accepts connections.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from durable_agents_local.services import build_app
from durable_agents_local.services.server import HOST, ServicesServer


def main(argv: list[str] | None = None) -> int:
    """Serves payments, email and tickets (on 127.0.0.1 by default) until SIGTERM or SIGINT.

    Args:
        argv: Command-line arguments (``sys.argv[1:]`` if omitted).

    Returns:
        The exit code.

    Raises:
        OSError: If the port cannot be bound.
    """
    parser = argparse.ArgumentParser(
        prog="python -m durable_agents_local.services", description=__doc__
    )
    parser.add_argument("--port", type=int, default=8900, help="0 picks a free port")
    parser.add_argument("--state-file", type=Path, help="persist ledgers to this JSON file")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    parser.add_argument(
        "--host",
        default=HOST,
        help="the address to listen on (default %(default)s; `make sam-local` passes its "
        "Docker network's gateway)",
    )
    args = parser.parse_args(argv)
    server = ServicesServer(
        build_app(args.state_file), args.port, verbose=args.verbose, host=args.host
    )
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    print(server.url, flush=True)
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
