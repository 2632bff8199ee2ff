"""urllib that never follows a redirect: local mode's clients send a request only where asked.

urllib's default handler follows a 3xx to whatever host its ``Location`` names and resends the
request's headers there (``Authorization``, ``X-Amz-Security-Token`` for the CLI on a deployed
Api). Every HTTP client of this package opens its requests with ``OPENER``: a 3xx comes back
as an ``urllib.error.HTTPError`` that names its status, like any other refusal.
"""

from __future__ import annotations

import urllib.request
from email.message import Message
from typing import IO


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """Never follows a redirect: the 3xx is raised as an ``HTTPError``."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        """No request to follow with: urllib raises the 3xx as an ``HTTPError``."""
        return None


OPENER = urllib.request.build_opener(NoRedirects)
"""The opener every client of local mode uses (``OPENER.open(request, timeout=…)``)."""
