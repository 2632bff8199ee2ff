"""The durable store process refuses what it cannot serve faithfully: a second store on its
state directory, a log that does not replay, a damaged log; and it survives a torn record."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import boto3
import pytest

from durable_agents_local.durable_store import encode_request
from durable_agents_local.moto_server import MotoProcess, free_port
from durable_agents_local.wal import WriteAheadLog

pytestmark = [pytest.mark.slow]


def _dynamodb(store: MotoProcess) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=store.endpoint,
        region_name="us-east-1",
        aws_access_key_id=store.store_key,
        aws_secret_access_key="testing",
    )


def _put_to_missing_table() -> bytes:
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "CONTENT_TYPE": "application/x-amz-json-1.0",
        "HTTP_HOST": "127.0.0.1:5010",
        "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.PutItem",
        "HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=testing/20261201/us-east-1/dynamodb/"
        "aws4_request, SignedHeaders=host, Signature=0",
    }
    body = json.dumps({"TableName": "missing", "Item": {"pk": {"S": "a"}}}).encode()
    return encode_request(environ, body)


def test_a_second_store_on_one_state_dir_is_refused(tmp_path: Path) -> None:
    first = MotoProcess(free_port(), tmp_path)
    first.start()
    try:
        with pytest.raises(RuntimeError, match="code 3"):
            MotoProcess(free_port(), tmp_path).start()
    finally:
        first.stop()


def test_a_log_that_does_not_replay_is_refused(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal-0.log")
    wal.append(_put_to_missing_table())
    wal.close()
    with pytest.raises(RuntimeError, match="code 3"):
        MotoProcess(free_port(), tmp_path).start()


def test_a_torn_last_record_is_dropped_on_restart(tmp_path: Path) -> None:
    port = free_port()
    store = MotoProcess(port, tmp_path)
    store.start()
    client = _dynamodb(store)
    client.create_table(
        TableName="t",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName="t", Item={"pk": {"S": "kept"}})
    os.kill(store.pid or 0, signal.SIGKILL)
    store.stop()
    with (tmp_path / "wal-0.log").open("ab") as log:
        log.write(b"\x00\x00\x10\x00torn")  # a record whose write was cut short
    store = MotoProcess(port, tmp_path, store_key=store.store_key)  # `client` keeps its key
    store.start()
    try:
        item = client.get_item(TableName="t", Key={"pk": {"S": "kept"}}, ConsistentRead=True)
        assert item["Item"] == {"pk": {"S": "kept"}}
    finally:
        store.stop()
