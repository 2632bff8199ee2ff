"""Local mode's store answers only holders of its session key (issue 31, finding 1).

The store refuses web pages (``test_local_rebinding_moto``), but any other local process or
user could talk to it with any credentials (moto accepts anything) and read or write every
table. Now each store has a session key: requests must carry it as their SigV4 access key id
(the ``Authorization`` header's ``Credential=``, or a presigned URL's ``X-Amz-Credential``),
or get 403 before moto sees them. The key reaches local mode's processes through the child's
environment and a key file only the developer's user can read; never through argv.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from durable_agents_local import store_key as keys
from durable_agents_local.aws import LocalSession
from durable_agents_local.functions import FunctionSpec
from durable_agents_local.moto_server import HOST, MotoProcess, free_port
from durable_agents_local.reattach import StoreWatch
from durable_agents_local.runs import RunsClient, RunsError
from durable_agents_local.worker import WorkerOptions, function_environment

ROOT = Path(__file__).resolve().parents[2]
TABLE = {
    "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
    "BillingMode": "PAY_PER_REQUEST",
}


@pytest.fixture(scope="module")
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("store-key") / "run"
    mp = pytest.MonkeyPatch()
    mp.setenv(keys.RUNTIME_DIR_VARIABLE, str(path))
    mp.delenv(keys.KEY_VARIABLE, raising=False)
    yield path
    mp.undo()


@pytest.fixture(scope="module")
def store(runtime_dir: Path) -> Iterator[MotoProcess]:
    process = MotoProcess(free_port())
    process.start()
    yield process
    process.stop()


def _client(store: MotoProcess, service: str, key: str | None) -> Any:
    make: Any = boto3.client  # typed per service name; the tests pick it at run time
    return make(
        service,
        endpoint_url=store.endpoint,
        region_name="us-east-1",
        aws_access_key_id=key or keys.new_key(),
        aws_secret_access_key="whatever",
    )


def _tables(store: MotoProcess) -> list[str]:
    return list(store.session().client("dynamodb").list_tables()["TableNames"])


def _post(
    store: MotoProcess, headers: dict[str, str], body: bytes, path: str = "/"
) -> tuple[int, str]:
    connection = http.client.HTTPConnection(HOST, store.port, timeout=10)
    try:
        connection.request("POST", path, body=body, headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.read().decode()
    finally:
        connection.close()


def _create_table_headers(authorization: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": "DynamoDB_20120810.CreateTable",
    }
    if authorization is not None:
        headers["Authorization"] = authorization
    return headers


def _sigv4(akid: str) -> str:
    return (
        f"AWS4-HMAC-SHA256 Credential={akid}/20260101/us-east-1/dynamodb/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=0"
    )


def _create_body(name: str) -> bytes:
    return json.dumps({"TableName": name, **TABLE}).encode()


def test_a_request_with_another_key_is_refused_and_changes_nothing(store: MotoProcess) -> None:
    with pytest.raises(ClientError) as refused:
        _client(store, "dynamodb", "testing").create_table(TableName="stolen", **TABLE)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as guessed:
        _client(store, "dynamodb", None).create_table(TableName="guessed", **TABLE)
    assert guessed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert "stolen" not in _tables(store)
    assert "guessed" not in _tables(store)


def test_a_request_without_credentials_is_refused_and_changes_nothing(store: MotoProcess) -> None:
    status, text = _post(store, _create_table_headers(None), _create_body("anonymous"))
    assert status == 403, text
    assert "no access key id" in text
    assert store.store_key not in text
    assert "anonymous" not in _tables(store)


@pytest.mark.parametrize(
    "place",
    ["signature", "other header", "body", "query", "prefix of another id"],
)
def test_the_key_in_a_wrong_place_is_refused_and_changes_nothing(
    store: MotoProcess, place: str
) -> None:
    key = store.store_key
    name = "misplaced-" + place.replace(" ", "-")
    headers = _create_table_headers(_sigv4("testing"))
    body = _create_body(name)
    path = "/"
    if place == "signature":
        headers["Authorization"] = headers["Authorization"].replace(
            "Signature=0", f"Signature={key}"
        )
    elif place == "other header":
        headers["X-Amz-Security-Token"] = key
        headers["X-Store-Key"] = key
    elif place == "body":
        body = json.dumps({"TableName": name, "Credential": key, **TABLE}).encode()
    elif place == "query":
        path = f"/?key={key}&Credential={key}/20260101/us-east-1/dynamodb/aws4_request"
    else:
        headers["Authorization"] = _sigv4(key + "X")
    status, text = _post(store, headers, body, path)
    assert status == 403, text
    assert key not in text
    assert name not in _tables(store)


def test_the_key_in_the_authorization_header_is_served(store: MotoProcess) -> None:
    dynamodb = _client(store, "dynamodb", store.store_key)
    dynamodb.create_table(TableName="kept", **TABLE)
    assert "kept" in _tables(store)
    status, text = _post(store, _create_table_headers(_sigv4(store.store_key)), _create_body("raw"))
    assert status == 200, text
    assert "raw" in _tables(store)


@pytest.mark.parametrize(
    ("version", "marker"), [("s3v4", "X-Amz-Credential="), (None, "AWSAccessKeyId=")]
)
def test_the_key_in_a_presigned_url_is_served_and_another_is_refused(
    store: MotoProcess, version: str | None, marker: str
) -> None:
    config = Config(signature_version=version) if version else None
    s3 = store.session().client("s3")
    if "presigned" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="presigned")
    s3.put_object(Bucket="presigned", Key="note", Body=b"only for the key's holders")
    params = {"Bucket": "presigned", "Key": "note"}
    signer: Any = boto3.client
    own = signer(
        "s3",
        endpoint_url=store.endpoint,
        region_name="us-east-1",
        aws_access_key_id=store.store_key,
        aws_secret_access_key="whatever",
        config=config,
    )
    url = own.generate_presigned_url("get_object", Params=params)
    assert marker + store.store_key in url
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.read() == b"only for the key's holders"
    forged = signer(
        "s3",
        endpoint_url=store.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="whatever",
        config=config,
    ).generate_presigned_url("get_object", Params=params)
    assert marker + "testing" in forged
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(forged, timeout=10)
    assert refused.value.code == 403
    assert b"only for the key's holders" not in refused.value.read()


def test_the_key_file_is_private_and_local_sessions_find_it(
    store: MotoProcess, runtime_dir: Path
) -> None:
    path = keys.key_file(store.port)
    assert path.parent == runtime_dir
    assert path.read_text().strip() == store.store_key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(runtime_dir.stat().st_mode) == 0o700
    assert keys.key_for(store.endpoint) == store.store_key
    assert LocalSession(store.endpoint).store_key == store.store_key
    assert "kept" in LocalSession(store.endpoint).client("dynamodb").list_tables()["TableNames"]


def test_the_key_is_not_on_the_childs_command_line(store: MotoProcess) -> None:
    cmdline = Path(f"/proc/{store.pid}/cmdline").read_bytes()
    assert b"durable_agents_local.moto_server" in cmdline
    assert store.store_key.encode() not in cmdline


def test_the_key_file_is_removed_at_a_clean_stop_and_kept_for_a_revived_store(
    runtime_dir: Path,
) -> None:
    process = MotoProcess(free_port())
    process.start()
    path = keys.key_file(process.port)
    try:
        assert path.read_text().strip() == process.store_key
        os.kill(process.pid or 0, 9)
        process._process.wait()  # type: ignore[union-attr]  # the SIGKILLed child, reaped
        assert process.revive()  # same key: clients made before go on working
        assert path.read_text().strip() == process.store_key
        assert process.session().client("dynamodb").list_tables()["TableNames"] == []
    finally:
        process.stop()
    assert not path.exists()


def test_a_store_started_by_hand_makes_a_key_and_says_where_it_is(runtime_dir: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != keys.KEY_VARIABLE}
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durable_agents_local.moto_server",
            "--port",
            str(port),
            "--ephemeral",
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stderr is not None
        line = child.stderr.readline()
        path = keys.key_file(port)
        assert str(path) in line, line
        key = path.read_text().strip()
        assert key.startswith("LOCAL")
        assert len(key) == 37
        assert key not in line
        endpoint = f"http://{HOST}:{port}"
        assert LocalSession(endpoint).client("dynamodb").list_tables()["TableNames"] == []
    finally:
        child.terminate()
        child.wait(30)
    assert child.returncode == 0
    assert not path.exists()


def test_key_for_says_which_file_it_looked_for(tmp_path: Path) -> None:
    environ = {keys.RUNTIME_DIR_VARIABLE: str(tmp_path)}
    with pytest.raises(keys.StoreKeyMissingError) as missing:
        keys.key_for("http://127.0.0.1:5999", environ)
    message = str(missing.value)
    assert str(tmp_path / "store-5999.key") in message
    assert "durable-agents local" in message
    assert "durable-agents moto" in message
    assert keys.KEY_VARIABLE in message


def test_a_runs_client_without_a_key_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(keys.RUNTIME_DIR_VARIABLE, str(tmp_path))
    monkeypatch.delenv(keys.KEY_VARIABLE, raising=False)
    with pytest.raises(RunsError, match=r"store-5999\.key"):
        RunsClient("http://127.0.0.1:5999")


def test_the_environment_variable_wins_over_the_key_file(tmp_path: Path) -> None:
    environ = {keys.RUNTIME_DIR_VARIABLE: str(tmp_path)}
    keys.write_key(5998, "LOCALFROMFILE", environ)
    assert keys.key_for("http://127.0.0.1:5998", environ) == "LOCALFROMFILE"
    environ[keys.KEY_VARIABLE] = "LOCALFROMENV"
    assert keys.key_for("http://127.0.0.1:5998", environ) == "LOCALFROMENV"


def test_key_files_are_written_privately_and_removed_only_by_their_store(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    run.chmod(0o755)
    environ = {keys.RUNTIME_DIR_VARIABLE: str(run)}
    first, second = keys.new_key(), keys.new_key()
    assert first != second
    path = keys.write_key(6001, first, environ)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700  # tightened
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    keys.write_key(6001, second, environ)  # a later store on the same port
    assert not keys.remove_key(6001, first, environ)
    assert keys.read_key(6001, environ) == second
    assert keys.remove_key(6001, second, environ)
    assert keys.read_key(6001, environ) is None
    assert sorted(p.name for p in run.iterdir()) == []  # no temporary file left behind


def test_the_runtime_directory_follows_xdg_then_home(tmp_path: Path) -> None:
    assert keys.runtime_dir({"XDG_RUNTIME_DIR": str(tmp_path)}) == tmp_path / "durable-agents"
    assert keys.runtime_dir({}) == Path.home() / ".cache" / "durable-agents" / "run"
    assert keys.runtime_dir({keys.RUNTIME_DIR_VARIABLE: "/x", "XDG_RUNTIME_DIR": "/y"}) == Path(
        "/x"
    )


def test_the_functions_reach_the_store_with_its_key_as_default_credentials() -> None:
    spec = FunctionSpec("Fn", "m.handler", Path("."), 3, 128, 0, {})
    key = keys.new_key()
    env = function_environment([spec], WorkerOptions(), "http://127.0.0.1:5010", key)
    assert env["AWS_ACCESS_KEY_ID"] == key
    assert env[keys.KEY_VARIABLE] == key
    assert env["AWS_SECRET_ACCESS_KEY"]


def test_an_attached_worker_is_told_once_when_a_restarted_store_refuses_its_key(
    store: MotoProcess, caplog: pytest.LogCaptureFixture
) -> None:
    stranger = _client(store, "sqs", "testing")  # the key of a store that is gone
    watch = StoreWatch(lambda: stranger.list_queues(), lambda: None, threading.Event())
    with caplog.at_level(logging.WARNING, logger="durable_agents_local"):
        assert watch.check()
        assert watch.check()
    refusals = [r.getMessage() for r in caplog.records if "refuses this worker" in r.getMessage()]
    assert len(refusals) == 1, refusals
    assert keys.KEY_VARIABLE in refusals[0]
    assert watch.reattached == 0


def test_local_mode_attached_to_a_store_it_has_no_key_for_says_where_it_looked(
    store: MotoProcess, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != keys.KEY_VARIABLE}
    env[keys.RUNTIME_DIR_VARIABLE] = str(tmp_path)  # not the store's: no key file there
    done = subprocess.run(
        [sys.executable, "-m", "durable_agents_local.cli.main", "local",
         "--moto-endpoint", store.endpoint, "--port", str(free_port())],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"{tmp_path / f'store-{store.port}.key'} does not exist" in done.stderr
    assert "Traceback" not in done.stderr
