"""Who calls the local Api: the IAM caller every local request carries.

On AWS, API Gateway checks each request's SigV4 signature and puts the caller's ARN in
``requestContext.identity.userArn``; the Api's own checks (approvers, link minters, review
operators) then decide what that caller may do. Locally nothing is signed: every request's
caller is ``--caller-arn`` (``LOCAL_CALLER_ARN`` by default), or the ARN its
``X-Local-Caller-Arn`` header names, and the same checks apply to it.
"""

from __future__ import annotations

from durable_agents_local.lambda_context import LOCAL_ACCOUNT_ID

LOCAL_CALLER_ARN = f"arn:aws:iam::{LOCAL_ACCOUNT_ID}:user/local"
"""The IAM caller of every local request, unless ``--caller-arn`` or the header says otherwise."""
CALLER_HEADER = "X-Local-Caller-Arn"
"""The request header naming another IAM caller for one request."""


def check_caller_arn(text: str) -> str:
    """Accepts an IAM ARN (``arn:<partition>:<service>:<region>:<account>:<resource>``).

    Raises:
        ValueError: If ``text`` is not shaped like an ARN.
    """
    if not text.startswith("arn:") or len(text.split(":", 5)) < 6 or not text.split(":", 5)[5]:
        raise ValueError(f"expected an IAM ARN (arn:aws:iam::ACCOUNT:user/NAME), got {text!r}")
    return text


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""The names local mode's servers answer to (with their own port, or none)."""


def is_own_host(host: str | None, port: int, bound: str | None = None) -> bool:
    """Whether a request's ``Host`` header names this loopback server.

    A web page whose DNS name an attacker rebinds to 127.0.0.1 reaches local mode's ports
    from the victim's browser, but its requests still carry the attacker's name in ``Host``
    (and in ``Origin``, so an Origin check compared with ``Host`` passes). Answering only the
    loopback names shuts that out: a browser sends ``Host: localhost:PORT`` only to a page it
    loaded from ``localhost:PORT``. A ``Host`` without a port (HTTP/1.0 tools, raw tests) names
    no other site, so it is accepted for a loopback name; a request without ``Host`` at all
    comes from no browser and is accepted too.

    Args:
        host: The ``Host`` header, or None if the request had none.
        port: The port the server listens on.
        bound: The address the server listens on when it is not loopback (the moto store of
            ``make sam-local``, on the gateway of the Docker network it created): that address
            with ``port`` is its own name too. A browser sends it only to a page loaded from it.

    Returns:
        True if ``host`` is a loopback name or ``bound``, optionally with ``port``.
    """
    if host is None:
        return True
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 literal: "[::1]" or "[::1]:3000"
        name, bracket, rest = host.partition("]")
        name += bracket
    else:
        name, colon, rest = host.partition(":")
        rest = colon + rest
    names = (*LOOPBACK_NAMES, bound) if bound else LOOPBACK_NAMES
    return name in names and rest in ("", f":{port}")
