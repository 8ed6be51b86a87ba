"""docs/porting-lambda.md's examples, run: the walkthrough's function files and configuration, as the
page shows them, through SNS -> SQS -> daemon -> presigned URL, against the emulator's S3; and the
settings reference parses to what its comments say."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from cfn_provider.config import load_config_file
from cfn_provider.functions.settings import FunctionSettings, parse_options
from cfn_provider.local.emulator import Provider, Stack
from tests.support.aws import response_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "porting-lambda.md"
CODE = "/opt/cfn-functions/s3-object"


def files() -> dict[str, str]:
    """Every fenced block of the page whose first line is `# file: NAME` (or `# NAME.py`: the
    walkthrough's files, which the doc test also runs under simulate), by NAME."""
    found = {}
    for block in re.findall(r"```[a-z]*\n(.*?)```", DOC.read_text(), flags=re.S):
        first, _, rest = block.partition("\n")
        if first.startswith("# file: "):
            found[first[len("# file: ") :].strip()] = rest
        elif re.fullmatch(r"# \w+\.py", first):
            found[first[2:]] = rest
    return found


def test_the_settings_reference_is_what_it_says(tmp_path):
    (tmp_path / "c.toml").write_text(files()["/etc/cfn-provider/settings-reference.toml"])
    values = load_config_file(tmp_path / "c.toml")
    assert values["handler"] == ["Custom::Thing=lambda:index.handler"]
    assert parse_options(values["function"]) == {
        "Custom::Thing": FunctionSettings(
            code="/opt/cfn-functions/thing",
            environment={"TABLE_NAME": "things", "LOG_LEVEL": "INFO"},
            memory_mb=256,
            timeout=30,
            concurrency=2,
            name="thing",
            log_group="/cfn-provider/thing",
            log_stream="thing",
        )
    }


@pytest.fixture(autouse=True)
def _region(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")


async def test_the_walkthrough_ports_the_function_unchanged(run_daemon, stack: Stack, provider: Provider, tmp_path):
    page = files()
    folder = tmp_path / "s3-object"
    folder.mkdir()
    for name in ("resource.py", "custom_response.py"):
        (folder / name).write_text(page[name])
    (tmp_path / "config.toml").write_text(page["/etc/cfn-provider/config.toml"].replace(CODE, str(folder)))
    config = load_config_file(tmp_path / "config.toml")
    handlers = tuple(tuple(h.split("=", 1)) for h in config["handler"])
    assert handlers == (("Custom::S3Object", "lambda:resource.handler"),)
    with capture_logs() as logs:
        await run_daemon(handlers=handlers, functions=parse_options(config["function"]))
        s3 = provider.emulator.client("s3")
        bucket = f"my-site-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        props = {"Bucket": bucket, "Key": "README.txt", "Body": "Hello", "ServiceTimeout": "30"}
        create = stack.request("Create", "Readme", resource_type="Custom::S3Object", properties=props)
        stack.publish(create)
        resp = await response_of(stack, create)
        assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == f"{bucket}/README.txt"
        assert resp["Data"] == {"Url": f"s3://{bucket}/README.txt"}
        obj = s3.get_object(Bucket=bucket, Key="README.txt")
        assert obj["Body"].read() == b"Hello" and obj["ContentType"] == "text/plain; charset=utf-8"
        delete = stack.request(
            "Delete",
            "Readme",
            resource_type="Custom::S3Object",
            properties=props,
            physical_id=resp["PhysicalResourceId"],
        )
        stack.publish(delete)
        assert (await response_of(stack, delete))["Status"] == "SUCCESS"
        assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    mine = [e for e in logs if e.get("function") == "Custom-S3Object"]
    assert any(
        e.get("message") == f"Create s3://{bucket}/README.txt" and e["request_id"] == create["RequestId"] for e in mine
    )
    assert any(e.get("message") == "Status code: OK" for e in mine)
