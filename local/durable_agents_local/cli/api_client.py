"""A client of the deployed Api (or of local mode's): every request signed with SigV4.

On AWS the Api's routes are IAM-authorised: API Gateway checks each request's SigV4 signature
(service ``execute-api``) and names the caller to the Api. The client signs with botocore's
signer and the user's normal credential chain (``boto3.Session``: environment, profile, SSO,
instance role), so ``durable-agents --stack NAME runs list`` works wherever ``aws`` does.
Local mode (``http://127.0.0.1:3000``) checks no signature: requests go unsigned, naming the
caller in ``X-Local-Caller-Arn`` when one is given, exactly as local mode documents.

A signature (and a session token) is sent over https only, or over plain http to a loopback
host (127.0.0.0/8, ::1, ``localhost``): a signed request to any other ``http://`` URL is
refused before it is sent. Redirects are never followed: urllib would send the request's
headers, the signature among them, on to whatever host the ``Location`` names. A 3xx answer
is an ``ApiRefusedError`` naming the ``Location``.

The Api URL is ``--api-url``, or the ``ApiUrl`` output of CloudFormation stack ``--stack``, or
local mode's. Every failure is an ``ApiError`` whose message is one line for a terminal.
"""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from durable_agents_local.cli.tables import escape_controls
from durable_agents_local.identity import CALLER_HEADER
from durable_agents_local.no_redirects import OPENER

LOCAL_API_URL = "http://127.0.0.1:3000"
STACK_OUTPUT = "ApiUrl"  # template.yaml's Outputs
SERVICE = "execute-api"
LOOPBACK_NAME = "localhost"
_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
_LOOPBACK_V6 = ipaddress.IPv6Address("::1")
_REGION_IN_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


class ApiError(Exception):
    """A request to the Api failed; the message is one line saying why.

    Attributes:
        status: The HTTP status the Api answered, or None if it never answered.
        body: The Api's JSON answer, if any.
    """

    def __init__(self, message: str, status: int | None = None, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body


class ApiUnreachableError(ApiError):
    """Nothing answered at the Api's URL (connection refused, DNS, timeout)."""


class ApiNotAllowedError(ApiError):
    """The Api answered 401/403: the caller may not do this (or the signature was refused)."""


class ApiNotFoundError(ApiError):
    """The Api answered 404: no such run (or approval, or call) in the caller's tenant."""


class ApiRefusedError(ApiError):
    """The Api answered another error status (400, 409, 5xx …), with its message."""


class ApiConfigError(ApiError):
    """The client cannot be set up: no credentials, no region, no such stack or output."""


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` is literally a loopback host: ``localhost``, 127.0.0.0/8 or ``::1``.

    Only the literal forms count. A name that merely resolves to loopback
    (``localhost.example.com``), an address in another spelling (``127.1``, ``2130706433``)
    or an IPv4-mapped one (``::ffff:127.0.0.1``) does not: what a name resolves to can change,
    and a wrong "no" only costs an error, a wrong "yes" a signature sent in the clear.
    """
    if host.lower() == LOOPBACK_NAME:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a name, or not the strict dotted / colon form
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in _LOOPBACK_V4
    return address == _LOOPBACK_V6


def is_local(url: str) -> bool:
    """Whether ``url`` is a loopback http URL (local mode: nothing to sign)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:  # an unbalanced [ in an IPv6 host
        return False
    return parts.scheme == "http" and is_loopback_host(host)


def require_secure(url: str) -> None:
    """Refuses a URL that a signed request must not be sent to.

    https is fine, and so is plain http to a loopback host (nothing crosses a network).

    Raises:
        ApiConfigError: If ``url`` is plain http to any other host (the signature and the
            session token would cross the network unencrypted), or not an http(s) URL.
    """
    try:
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
    except ValueError:  # an unbalanced [ in an IPv6 host
        scheme, host = "", None
    if scheme == "https" and host:
        return
    if is_local(url):
        return
    if scheme == "http" and host:
        raise ApiConfigError(
            f"refusing to sign requests to {url}: over plain http the SigV4 signature and "
            "session token would cross the network unencrypted; use an https:// URL (plain "
            "http is for local mode on 127.0.0.0/8, ::1 or localhost)"
        )
    raise ApiConfigError(f"expected the Api's https:// URL, got {url!r}")


def region_of(url: str) -> str | None:
    """The region in an execute-api host name (``abc.execute-api.eu-west-1.amazonaws.com``)."""
    match = _REGION_IN_HOST.search(urlsplit(url).hostname or "")
    return match.group(1) if match else None


def stack_api_url(cloudformation: Any, stack: str, output: str = STACK_OUTPUT) -> str:
    """The Api URL a deployed stack exports (its ``ApiUrl`` output).

    Args:
        cloudformation: A boto3 CloudFormation client.
        stack: The stack's name (or id).
        output: The output's key.

    Returns:
        The URL, without a trailing slash.

    Raises:
        ApiConfigError: If the stack does not exist, cannot be read, or has no such output.
    """
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        message = exc.response.get("Error", {}).get("Message") or str(exc)
        raise ApiConfigError(f"cannot read stack {stack!r}: {message}") from exc
    except BotoCoreError as exc:
        raise ApiConfigError(f"cannot read stack {stack!r}: {exc}") from exc
    outputs = {o["OutputKey"]: o["OutputValue"] for o in (stacks[0].get("Outputs") or [])}
    if output not in outputs:
        have = ", ".join(sorted(outputs)) or "none"
        raise ApiConfigError(f"stack {stack!r} has no output {output!r} (outputs: {have})")
    return str(outputs[output]).rstrip("/")


def segment(value: str) -> str:
    """One path segment, percent-encoded (an operation id's ``/`` stays inside it as ``%2F``)."""
    return quote(value, safe=":@")


@dataclass(frozen=True, slots=True)
class ApiClient:
    """Calls the Api at ``base_url``; signs every request when it has credentials.

    Attributes:
        base_url: The Api's base URL (with its stage on AWS), no trailing slash.
        credentials: botocore credentials to sign with (None: unsigned, for local mode).
        region: The region to sign for.
        caller_arn: Sent as ``X-Local-Caller-Arn`` (local mode's caller for the request).
        timeout: Seconds to wait for each answer.
    """

    base_url: str
    credentials: Any = None
    region: str | None = None
    caller_arn: str | None = None
    timeout: float = 15.0

    def headers(
        self,
        method: str,
        url: str,
        data: bytes | None,
        extra: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """The request's headers (``extra`` too, signed), with SigV4 when it has credentials.

        Raises:
            ApiConfigError: If there are credentials and ``url`` is plain http to a host that
                is not loopback (``require_secure``): nothing is signed for it.
        """
        headers = {
            "Accept": "application/json",
            "User-Agent": "durable-agents-cli",
            **(extra or {}),
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.caller_arn:
            headers[CALLER_HEADER] = self.caller_arn
        if self.credentials is None:
            return headers
        require_secure(url)
        from botocore.auth import SigV4Auth  # noqa: PLC0415
        from botocore.awsrequest import AWSRequest  # noqa: PLC0415

        request = AWSRequest(method=method, url=url, data=data, headers=headers)
        SigV4Auth(self.credentials, SERVICE, self.region or "us-east-1").add_auth(request)
        return dict(request.headers.items())

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | None] | None = None,
        body: Any = None,
        missing: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Sends one request and returns the Api's JSON answer.

        Args:
            method: ``GET`` or ``POST``.
            path: The path under the base URL (segments already encoded, see ``segment``).
            query: Query parameters (None values are left out).
            body: The JSON body (None: no body).
            missing: What a 404 means (``run run-1``): its message becomes ``no such …``.
            headers: More request headers (``Idempotency-Key``), signed with the rest.

        Returns:
            The decoded JSON answer of a 2xx status.

        Raises:
            ApiUnreachableError: If nothing answers.
            ApiNotAllowedError: On 401/403.
            ApiNotFoundError: On 404.
            ApiRefusedError: On any other non-2xx status (a redirect included: it is not
                followed), or an answer that is not JSON.
            ApiConfigError: If the request would be signed and sent over plain http to a host
                that is not loopback (before anything is sent).
        """
        pairs = {k: str(v) for k, v in (query or {}).items() if v is not None}
        url = f"{self.base_url}{path}" + (f"?{urlencode(sorted(pairs.items()))}" if pairs else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - http(s) URLs only (checked by the CLI)
            url, data=data, method=method, headers=self.headers(method, url, data, headers)
        )
        try:
            # Never a redirect: it would resend the signature to the host it names.
            with OPENER.open(request, timeout=self.timeout) as response:
                status, raw = int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
            if 300 <= status < 400:
                location = exc.headers.get("Location") if exc.headers else None
                shown = escape_controls(location) if location else "nowhere (no Location)"
                raise ApiRefusedError(
                    f"{method} {path} answered {status}, a redirect to {shown}: not "
                    "followed (it would carry the request's credentials there); is the URL "
                    "the Api's own?",
                    status,
                ) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiUnreachableError(f"cannot reach {self.base_url}: {reason}") from exc
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            answer = {"error": {"message": raw[:200].decode("utf-8", "replace")}}
        if 200 <= status < 300:
            return answer
        raise _error(method, path, status, answer, missing)


def _message(answer: Any) -> str:
    if isinstance(answer, Mapping):
        error = answer.get("error")
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
        if answer.get("message"):  # API Gateway's own answers: {"message": "Forbidden"}
            return str(answer["message"])
    return json.dumps(answer)[:200]


def _one_line(text: str) -> str:
    return escape_controls(" ".join(text.split()))


def field_errors(answer: Any) -> list[str]:
    """The field errors of a refusal (a 422's), one ``location: message`` each, escaped.

    The Api answers a body or an input that does not validate with ``{"error": {"message",
    "details": [{"loc": [...], "msg": ...}, ...]}}``; pydantic's and FastAPI's own shapes
    (``detail`` or ``errors``, at the top or in ``error``) are read too. A location is the
    ``loc`` path joined with dots (``sections.0``), ``(input)`` when it is empty. The Api's
    text is made one line with its control characters shown escaped (``escape_controls``).

    Args:
        answer: The Api's JSON answer.

    Returns:
        The lines, in the Api's order; none if it has no field errors.
    """
    if not isinstance(answer, Mapping):
        return []
    error = answer.get("error")
    places = [error, answer] if isinstance(error, Mapping) else [answer]
    found: list[Any] = next(
        (
            one[key]
            for one in places
            for key in ("details", "detail", "errors")
            if isinstance(one.get(key), list)
        ),
        [],
    )
    lines = []
    for item in found:
        if isinstance(item, Mapping):
            loc = item.get("loc")
            where = ".".join(str(part) for part in loc) if isinstance(loc, list) else ""
            message = str(item.get("msg") or item.get("message") or json.dumps(item))
            lines.append(f"{_one_line(where or '(input)')}: {_one_line(message)}")
        else:
            lines.append(_one_line(str(item)))
    return lines


def _error(method: str, path: str, status: int, answer: Any, missing: str | None) -> ApiError:
    # One line (whitespace, line breaks included, collapsed), and what control characters
    # remain shown escaped: the message is the Api's text, printed on a terminal.
    message = escape_controls(" ".join(_message(answer).split()))
    if status in (401, 403):
        return ApiNotAllowedError(f"not allowed: {message} ({method} {path})", status, answer)
    if status == 404:
        text = f"no such {missing} ({message})" if missing else f"not found: {message}"
        return ApiNotFoundError(text, status, answer)
    return ApiRefusedError(f"{method} {path} answered {status}: {message}", status, answer)


def connect(
    *,
    api_url: str | None = None,
    stack: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    caller_arn: str | None = None,
) -> ApiClient:
    """An ``ApiClient`` for ``--api-url``, ``--stack`` or (neither) local mode.

    A loopback http URL is local mode: unsigned. Any other URL is signed with the credentials
    of ``boto3.Session(profile_name=profile)``, for the URL's region (an execute-api host name
    says it), else ``region``, else the profile's; it must be https.

    Raises:
        ApiConfigError: If the stack or its output cannot be read, there are no credentials,
            no region can be found for a URL that is not an execute-api host name, or the URL
            is plain http to a host that is not loopback (checked before credentials are read).
    """
    if api_url and stack:
        raise ApiConfigError("give --api-url or --stack, not both")
    if not api_url and not stack:
        return ApiClient(LOCAL_API_URL, caller_arn=caller_arn)
    if api_url and is_local(api_url):
        return ApiClient(api_url.rstrip("/"), caller_arn=caller_arn)
    if api_url:
        require_secure(api_url)
    import boto3  # noqa: PLC0415
    from botocore.exceptions import BotoCoreError  # noqa: PLC0415

    try:
        session = boto3.Session(profile_name=profile, region_name=region)
        url = api_url or stack_api_url(session.client("cloudformation"), str(stack))
        credentials = session.get_credentials()
    except BotoCoreError as exc:  # an unknown profile, SSO expired, no region for --stack
        raise ApiConfigError(f"AWS configuration: {exc}") from exc
    url = url.rstrip("/")
    if is_local(url):
        return ApiClient(url, caller_arn=caller_arn)
    require_secure(url)  # a stack's ApiUrl output is https; anything else is refused too
    if credentials is None:
        raise ApiConfigError(
            "no AWS credentials found (environment, --profile, ~/.aws): cannot sign requests"
        )
    signing_region = region_of(url) or region or session.region_name
    if not signing_region:
        raise ApiConfigError(f"which region does {url} live in? pass --region")
    return ApiClient(url, credentials=credentials, region=signing_region, caller_arn=caller_arn)
