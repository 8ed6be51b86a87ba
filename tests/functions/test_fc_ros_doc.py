"""docs/ros.md's "Port an FC function" walkthrough, run: the function file and the configuration as
the page shows them, through the local MNS server -> daemon -> the function's own process -> the
ROS response endpoint, Create, Update and Delete."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cfn_provider.config import load_config_file
from cfn_provider.functions.settings import parse_options
from tests.dialects import conftest as ros_fixtures
from tests.dialects.conftest import JsonLog, ros_request
from tests.dialects.test_ros_service import answer, send, settled
from tests.support.mns_server import MnsServer
from tests.support.stub_s3 import StubS3

mns, mns_env, ros_daemon, json_log = (
    ros_fixtures.mns,
    ros_fixtures.mns_env,
    ros_fixtures.ros_daemon,
    ros_fixtures.json_log,
)
pytestmark = pytest.mark.slow  # a daemon and a function process

DOC = Path(__file__).resolve().parents[2] / "docs" / "ros.md"
CODE = "/opt/cfn-functions/registry"


def files() -> dict[str, str]:
    """Every fenced block of the page's "Port an FC function" section whose first line is `# file: NAME`."""
    section = DOC.read_text().partition("## Port an FC function")[2].partition("\n## ")[0]
    found = {}
    for block in re.findall(r"```[a-z]*\n(.*?)```", section, flags=re.S):
        first, _, rest = block.partition("\n")
        if first.startswith("# file: "):
            found[first[len("# file: ") :].strip()] = rest
    return found


async def test_the_walkthrough_ports_the_fc_function_unchanged(
    ros_daemon, mns_env: MnsServer, stub_s3: StubS3, json_log: JsonLog, tmp_path: Path
):
    page = files()
    folder = tmp_path / "registry"
    folder.mkdir()
    (folder / "index.py").write_text(page["index.py"])
    (tmp_path / "config.toml").write_text(page["/etc/cfn-provider/config.toml"].replace(CODE, str(folder)))
    config = load_config_file(tmp_path / "config.toml")
    assert config["transport"] == "mns"
    handlers = tuple(tuple(h.split("=", 1)) for h in config["handler"])
    assert handlers == (("Custom::Registry", "fc:index.handler"),)
    await ros_daemon(handlers=handlers, functions=parse_options(config["function"]))

    rtype = "Custom::Registry"
    create = ros_request(
        "Create", stub_s3.url("doc/create"), rtype=rtype, props={"Name": "billing", "Owner": "finance"}
    )
    send(mns_env, create)
    created = json.loads((await answer(stub_s3, "doc/create")).body)
    assert (created["Status"], created["PhysicalResourceId"]) == ("SUCCESS", "billing"), created
    assert created["Data"] == {"Greeting": "Hello, billing", "Region": create["RegionId"]}
    update = ros_request(
        "Update",
        stub_s3.url("doc/update"),
        rtype=rtype,
        stack_id=create["StackId"],
        physical_id="billing",
        props={"Name": "billing", "Owner": "accounts"},
        old_props={"Name": "billing", "Owner": "finance"},
    )
    send(mns_env, update)
    updated = json.loads((await answer(stub_s3, "doc/update")).body)
    assert (updated["Status"], updated["PhysicalResourceId"]) == ("SUCCESS", "billing"), updated
    delete = ros_request(
        "Delete",
        stub_s3.url("doc/delete"),
        rtype=rtype,
        stack_id=create["StackId"],
        physical_id="billing",
        props={"Name": "billing"},
    )
    send(mns_env, delete)
    deleted = json.loads((await answer(stub_s3, "doc/delete")).body)
    assert (deleted["Status"], deleted["PhysicalResourceId"]) == ("SUCCESS", "billing")
    await settled(mns_env)

    # the log lines the page shows: FC's format, its Initialize and Invoke lines, the service's name
    lines = json_log.events(function="Custom-Registry")
    messages = [e.get("message", "") for e in lines]
    assert any(m.startswith("FC Initialize Start RequestId: ") for m in messages)
    assert any(re.fullmatch(r"\S+Z \S+ \[INFO\] registry ready for registry", m) for m in messages), messages
    assert any(re.fullmatch(r"\S+Z \S+ \[INFO\] Create billing", m) for m in messages), messages
    assert any(e["event"] == "lambda.sent" and e["request_id"] == create["RequestId"] for e in lines)
    assert "its-own-secret" not in json_log.text
