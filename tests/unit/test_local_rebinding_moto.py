"""Local mode's store (the moto server) answers its own clients, not web pages (issue 31).

A page that rebinds its DNS name to 127.0.0.1 would read and write the journal through the
store's port; its requests name the attacker's host in ``Host``, so the store refuses them
(421). A page of any site can also post to 127.0.0.1 blindly (a "simple" request, e.g. an SQS
form), and a browser marks such requests with ``Origin`` or ``Sec-Fetch-*`` headers, which the
AWS SDKs never send: the store refuses those too (403), even when the request carries the
store's session key (which the page cannot know: ``test_local_store_key``). boto3 clients with
the key still work.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from durable_agents_local.isolated_moto import IsolatedMotoServer
from durable_agents_local.moto_server import HOST, endpoint_url, free_port
from durable_agents_local.store_key import new_key

LIST_TABLES = b"{}"
KEY = new_key()  # the store's session key: these tests are about what else it refuses


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    port = free_port()
    server = IsolatedMotoServer(store_key=KEY, ip_address=HOST, port=port, verbose=False)
    server.start()
    try:
        yield port
    finally:
        server.stop()


def _client(service: str, port: int) -> Any:
    # Credentials given here, not read from the environment: boto3's default session keeps
    # the credentials it resolved first, in an earlier test of the same process.
    make: Any = boto3.session.Session(
        aws_access_key_id=KEY, aws_secret_access_key="testing", region_name="us-east-1"
    ).client  # typed per service name; the tests pick the name at run time
    return make(service, endpoint_url=endpoint_url(port))


def _post(port: int, headers: dict[str, str], body: bytes, path: str = "/") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        connection.putrequest("POST", path, skip_host=True, skip_accept_encoding=True)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def _dynamodb_headers(host: str) -> dict[str, str]:
    return {
        "Host": host,
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.ListTables",
        "Authorization": f"AWS4-HMAC-SHA256 Credential={KEY}/20250101/us-east-1/dynamodb/"
        "aws4_request, SignedHeaders=host, Signature=x",
    }


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1:1"])
def test_the_store_refuses_a_foreign_host(store: int, host: str) -> None:
    dynamodb = _client("dynamodb", store)
    if "journal" not in dynamodb.list_tables()["TableNames"]:  # moto's state is per process
        dynamodb.create_table(
            TableName="journal",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    status, body = _post(store, _dynamodb_headers(host.format(port=store)), LIST_TABLES)
    assert status == 421, body
    assert b"journal" not in body
    status, body = _post(store, _dynamodb_headers(f"127.0.0.1:{store}"), LIST_TABLES)
    assert status == 200 and b"journal" in body  # the same request, to its own name


@pytest.mark.parametrize(
    "browser",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
        {"Sec-Fetch-Mode": "no-cors"},
    ],
)
def test_the_store_refuses_what_a_browser_sends_and_changes_nothing(
    store: int, browser: dict[str, str]
) -> None:
    # S3's POST-object upload: a multipart form, which any page may send to any address.
    s3 = _client("s3", store)
    bucket = f"payloads-{len(browser)}-{abs(hash(frozenset(browser.items())))}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="spilled", Body=b"recorded")
    boundary = "b0undary"
    form = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="key"\r\n\r\nspilled\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
        f"Content-Type: text/plain\r\n\r\nforged\r\n--{boundary}--\r\n"
    ).encode()
    headers = {
        "Host": f"127.0.0.1:{store}",
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        # The key too (a page cannot know it): the browser's headers alone are refused.
        "Authorization": f"AWS4-HMAC-SHA256 Credential={KEY}/20250101/us-east-1/s3/"
        "aws4_request, SignedHeaders=host, Signature=x",
    }
    status, body = _post(store, {**headers, **browser}, form, path=f"/{bucket}")
    assert status == 403, body
    assert s3.get_object(Bucket=bucket, Key="spilled")["Body"].read() == b"recorded"
    # The same form without a browser's headers is an SDK-like client's, and is served: so the
    # refusal above is what kept the payload.
    status, body = _post(store, headers, form, path=f"/{bucket}")
    assert status < 300, body
    assert s3.get_object(Bucket=bucket, Key="spilled")["Body"].read() == b"forged"


def test_boto3_clients_still_work(store: int) -> None:
    s3 = _client("s3", store)
    s3.create_bucket(Bucket="payloads")
    s3.put_object(Bucket="payloads", Key="k", Body=b"v")
    assert s3.get_object(Bucket="payloads", Key="k")["Body"].read() == b"v"
    sqs = _client("sqs", store)
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "m"


def _wsgi(app: Any, host: str | None, port: int, headers: dict[str, str] | None = None) -> str:
    environ: dict[str, Any] = {"SERVER_PORT": str(port), "REQUEST_METHOD": "POST"}
    if host is not None:
        environ["HTTP_HOST"] = host
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    answered: list[str] = []
    app(environ, lambda status, _headers: answered.append(status))
    return answered[0]


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("172.18.0.1:5010", "200 OK"),  # `make sam-local`'s containers name the gateway
        ("172.18.0.1", "200 OK"),
        ("127.0.0.1:5010", "200 OK"),
        ("172.18.0.1:5011", "421 Misdirected Request"),  # another port: another server
        ("172.18.0.2:5010", "421 Misdirected Request"),  # another address
        ("attacker.example:5010", "421 Misdirected Request"),
    ],
)
def test_a_store_bound_to_a_network_gateway_answers_that_address_too(
    host: str, status: str
) -> None:
    from durable_agents_local.isolated_moto import refuse_browsers

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b""]

    assert _wsgi(refuse_browsers(app, bound="172.18.0.1"), host, 5010) == status
    # Bound there or not, a page is still refused.
    assert _wsgi(
        refuse_browsers(app, bound="172.18.0.1"), "172.18.0.1:5010", 5010, {"Origin": "http://x"}
    ).startswith("403")


def test_a_loopback_store_does_not_answer_a_gateway_address() -> None:
    from durable_agents_local.isolated_moto import refuse_browsers

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [b""]

    assert _wsgi(refuse_browsers(app), "172.18.0.1:5010", 5010).startswith("421")
