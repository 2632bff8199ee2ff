"""Issue 31 (6): the CLI never sends a SigV4 signature in the clear, nor to a redirect's host.

Servers run for real on 127.0.0.1. ``2130706433`` is 127.0.0.1 written as one number: the
resolver connects it to loopback, but it is not one of the literal loopback hosts, so the CLI
must treat it as a remote host — which lets a test observe what a remote host would receive.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.credentials import Credentials

from durable_agents_local.cli import console_proxy
from durable_agents_local.cli.api_client import (
    ApiClient,
    ApiConfigError,
    ApiRefusedError,
    connect,
    is_local,
)
from durable_agents_local.cli.console_proxy import ConsoleProxy, ConsoleProxyError

SESSION = Credentials("ASIAEXAMPLE", "secret-example", token="session-token-example")


@dataclass
class Recorder:
    """A loopback server that records the headers of every request and answers as told."""

    port: int = 0
    seen: list[dict[str, str]] = field(default_factory=list)
    status: int = 200
    location: str | None = None


@contextmanager
def recording_server(status: int = 200, location: str | None = None) -> Iterator[Recorder]:
    recorder = Recorder(status=status, location=location)

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            recorder.seen.append({k.lower(): v for k, v in self.headers.items()})
            body = b"{}"
            self.send_response(recorder.status)
            if recorder.location:
                self.send_header("Location", recorder.location)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _serve

        def log_message(self, *_: Any) -> None:
            """Silenced."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


def test_loopback_is_the_literal_loopback_hosts_only() -> None:
    for url in ("http://127.0.0.1:3000", "http://127.0.0.2:3000/", "http://127.255.0.9",
                "http://localhost:3000", "http://LOCALHOST", "http://[::1]:3000"):  # fmt: skip
        assert is_local(url), url
    for url in ("http://2130706433:3000", "http://127.1", "http://127.0.0.1.example.com",
                "http://localhost.example.com", "http://0.0.0.0:3000", "http://[::2]",
                "http://[::ffff:127.0.0.1]", "https://127.0.0.1:3000", "ftp://127.0.0.1",
                "http://[::1"):  # fmt: skip
        assert not is_local(url), url


def test_a_signed_client_refuses_plain_http_to_a_host_not_on_loopback() -> None:
    with recording_server() as remote:
        url = f"http://2130706433:{remote.port}"
        client = ApiClient(url, credentials=SESSION, region="eu-west-1")
        with pytest.raises(ApiConfigError) as raised:
            client.call("GET", "/runs")
        assert url in str(raised.value) and "https" in str(raised.value)
        assert remote.seen == []  # refused before anything was sent


def test_connect_refuses_plain_http_to_a_host_not_on_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-example")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token-example")
    with recording_server() as remote:
        for url in (f"http://2130706433:{remote.port}", "http://api.example.com/prod"):
            with pytest.raises(ApiConfigError) as raised:
                connect(api_url=url, region="eu-west-1").call("GET", "/runs")
            message = str(raised.value)
            assert url in message and "https://" in message and "unencrypted" in message
        assert remote.seen == []
    # https, and plain http on loopback (local mode, unsigned), are fine.
    assert connect(api_url="https://api.example.com/prod", region="eu-west-1").credentials
    assert connect(api_url="http://127.0.0.2:3000").credentials is None


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_an_error_and_never_followed(status: int) -> None:
    with recording_server() as elsewhere:
        target = f"http://localhost:{elsewhere.port}/runs"
        with recording_server(status=status, location=target) as api:
            client = ApiClient(f"http://127.0.0.1:{api.port}", credentials=SESSION, region="x")
            with pytest.raises(ApiRefusedError) as raised:
                client.call("GET", "/runs", query={"limit": 5})
            assert len(api.seen) == 1 and "authorization" in api.seen[0]
        # urllib would have sent both headers on to the redirect's host.
        assert [h for h in elsewhere.seen if "x-amz-security-token" in h] == []
        assert elsewhere.seen == []
    assert raised.value.status == status
    assert target in str(raised.value) and "redirect" in str(raised.value)


def test_an_unsigned_local_request_does_not_follow_a_redirect_either() -> None:
    with recording_server() as elsewhere:
        target = f"http://127.0.0.1:{elsewhere.port}/runs"
        with recording_server(status=302, location=target) as api:
            caller = "arn:aws:iam::000000000000:user/ops"
            with pytest.raises(ApiRefusedError, match="redirect"):
                ApiClient(f"http://127.0.0.1:{api.port}", caller_arn=caller).call("GET", "/runs")
        assert elsewhere.seen == []


def test_the_console_proxy_refuses_a_plain_http_upstream_not_on_loopback() -> None:
    def signer(method: str, url: str, headers: Any, body: bytes) -> dict[str, str]:
        raise AssertionError("nothing may be signed")

    with recording_server() as remote:
        url = f"http://2130706433:{remote.port}/Prod"
        with pytest.raises(ConsoleProxyError) as raised:
            ConsoleProxy(url, signer, port=0)
        assert url in str(raised.value) and "https://" in str(raised.value)
        assert remote.seen == []


def test_console_refuses_a_plain_http_upstream_before_reading_credentials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_signer(region: str) -> Any:
        raise AssertionError("credentials are not read for a URL that cannot be used")

    monkeypatch.setattr(console_proxy, "sigv4_signer", no_signer)
    args = argparse.Namespace(
        api_url="http://abc123.execute-api.eu-west-1.amazonaws.com/Prod", region=None, port=0
    )
    assert console_proxy.run(args) == 2
    out = capsys.readouterr()
    assert "https://" in out.out + out.err and args.api_url in out.out + out.err
