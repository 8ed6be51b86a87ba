"""cfn_provider.handlers.command (Custom::Command): operator-configured commands, run through the real queue."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cfn_provider.handlers import command
from cfn_provider.handlers.command import CONFIG_ENV, ConfigError, env_name, load_config, request_env
from tests.support.aws import response_of
from tests.support.daemons import TEST_HANDLERS

NAMED = (*TEST_HANDLERS, ("Custom::Command", None))  # the built-in, named as an operator would

SCRIPT = str(Path(__file__).with_name("command_script.py"))
PY = sys.executable


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "commands.toml"
    path.write_text(text)
    return path


def argv(action: str, *extra: str) -> str:
    return json.dumps([PY, SCRIPT, action, *extra])


@pytest.fixture
def records(tmp_path: Path) -> Path:
    path = tmp_path / "records"
    path.mkdir()
    return path


@pytest.fixture
def configured(tmp_path: Path, records: Path, monkeypatch) -> Path:
    """A config with `dns` (all three actions), `noupdate` (create only) and a per-type entry. `dns`'s
    timeout leaves room for eight Python processes starting at once on a loaded CI machine (at 2 s,
    one that only prints its id once timed out there)."""
    path = write_config(
        tmp_path,
        f"""
[commands.dns]
create = {argv("create")}
update = {argv("update")}
delete = {argv("delete")}
timeout = 6
kill-grace = 0.5
replace-on = ["Zone"]
env = {{ RECORD_DIR = "{records}" }}

[commands.noupdate]
create = {argv("create")}
env = {{ RECORD_DIR = "{records}" }}

[commands.literal]
create = {argv("create", "$HOME; echo injected")}
env = {{ RECORD_DIR = "{records}" }}

[commands.viashell]
shell = true
create = "exec \\"$PY\\" \\"$SCRIPT\\" create \\"$CFN_RESOURCE_PROPERTIES_NAME\\""
env = {{ RECORD_DIR = "{records}", PY = "{PY}", SCRIPT = "{SCRIPT}" }}

[types."Custom::DnsRecord"]
create = {argv("create", "typed")}
delete = {argv("delete", "typed")}
env = {{ RECORD_DIR = "{records}" }}
""",
    )
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


def recorded(records: Path, request: dict[str, Any], action: str) -> dict[str, Any]:
    return json.loads((records / f"{request['RequestId']}.{action}.json").read_text())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


async def answer(stack, req: dict[str, Any]) -> dict[str, Any]:
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp is not None, "no response"
    return resp


# ---------------------------------------------------------------------------------- lifecycle


async def test_create_update_replace_delete(run_daemon, stack, configured, records):
    await run_daemon(handlers=NAMED)
    props = {
        "Command": "dns",
        "Name": "www",
        "Zone": "example.com",
        "RecordName": "www.example.com",
        "Tags": [{"Key": "a", "Value": "b"}],
        "Ttl": "300",
    }
    create = stack.request("Create", "Record", "Custom::Command", props)
    resp = await answer(stack, create)
    assert resp["Status"] == "SUCCESS", resp
    assert resp["PhysicalResourceId"] == "cmd-www"
    assert resp["Data"] == {"Action": "create", "Name": "www", "Replacement": ""}

    seen = recorded(records, create, "create")
    assert seen["argv"] == ["create"]
    assert "ResponseURL" not in seen["stdin"]  # the presigned URL is the daemon's, not the command's
    assert seen["stdin"] == {k: v for k, v in create.items() if k != "ResponseURL"}
    env = seen["env"]
    assert env["CFN_REQUEST_TYPE"] == "Create" and env["CFN_ACTION"] == "create"
    assert env["CFN_RESOURCE_TYPE"] == "Custom::Command"
    assert env["CFN_STACK_ID"] == stack.stack_id and env["CFN_STACK_NAME"] == stack.name
    assert env["CFN_LOGICAL_RESOURCE_ID"] == "Record" and env["CFN_REQUEST_ID"] == create["RequestId"]
    assert env["CFN_RESOURCE_PROPERTIES_RECORD_NAME"] == "www.example.com"
    assert env["CFN_RESOURCE_PROPERTIES_TTL"] == "300"
    assert env["CFN_RESOURCE_PROPERTIES_TAGS_0_KEY"] == "a"
    assert json.loads(env["CFN_RESOURCE_PROPERTIES_TAGS"]) == [{"Key": "a", "Value": "b"}]
    assert json.loads(env["CFN_RESOURCE_PROPERTIES"])["Zone"] == "example.com"
    assert "CFN_PHYSICAL_RESOURCE_ID" not in env and "CFN_REPLACEMENT" not in env
    # Only the allowlist of the daemon's environment: no AWS credentials leak into commands.
    assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["PATH"] == os.environ["PATH"] and env["RECORD_DIR"] == str(records)

    update = stack.request(
        "Update", "Record", "Custom::Command", {**props, "Ttl": "60"}, old_properties=props, physical_id="cmd-www"
    )
    resp = await answer(stack, update)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "cmd-www"
    assert resp["Data"]["Action"] == "update"
    env = recorded(records, update, "update")["env"]
    assert env["CFN_PHYSICAL_RESOURCE_ID"] == "cmd-www" and env["CFN_OLD_RESOURCE_PROPERTIES_TTL"] == "300"
    assert env["CFN_RESOURCE_PROPERTIES_TTL"] == "60"

    moved = {**props, "Zone": "example.org", "Name": "www2"}  # Zone is in replace-on
    replace = stack.request("Update", "Record", "Custom::Command", moved, old_properties=props, physical_id="cmd-www")
    resp = await answer(stack, replace)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "cmd-www2"
    assert resp["Data"] == {"Action": "create", "Name": "www2", "Replacement": "1"}
    assert recorded(records, replace, "create")["env"]["CFN_REQUEST_TYPE"] == "Update"

    delete = stack.request("Delete", "Record", "Custom::Command", props, physical_id="cmd-www")
    resp = await answer(stack, delete)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "cmd-www"
    assert recorded(records, delete, "delete")["env"]["CFN_PHYSICAL_RESOURCE_ID"] == "cmd-www"


async def test_changing_command_or_having_no_update_replaces(run_daemon, stack, configured, records):
    await run_daemon(handlers=NAMED)
    other = stack.request(
        "Update",
        "R",
        "Custom::Command",
        {"Command": "noupdate", "Name": "n"},
        old_properties={"Command": "dns", "Name": "n"},
        physical_id="cmd-n",
    )
    no_update = stack.request(
        "Update",
        "S",
        "Custom::Command",
        {"Command": "noupdate", "Name": "m2"},
        old_properties={"Command": "noupdate", "Name": "m"},
        physical_id="cmd-m",
    )
    unchanged = stack.request(
        "Update",
        "T",
        "Custom::Command",
        {"Command": "noupdate", "Name": "k", "ServiceTimeout": "99"},
        old_properties={"Command": "noupdate", "Name": "k"},
        physical_id="cmd-k",
    )
    no_delete = stack.request("Delete", "U", "Custom::Command", {"Command": "noupdate"}, physical_id="cmd-u")
    for req in (other, no_update, unchanged, no_delete):
        stack.publish(req)
    resp = await response_of(stack, other)
    assert resp["Status"] == "SUCCESS" and resp["Data"]["Action"] == "create" and resp["Data"]["Replacement"] == "1"
    resp = await response_of(stack, no_update)
    assert resp["PhysicalResourceId"] == "cmd-m2" and resp["Data"]["Replacement"] == "1"
    resp = await response_of(stack, unchanged)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "cmd-k" and "Data" not in resp
    resp = await response_of(stack, no_delete)
    assert resp["Status"] == "SUCCESS"
    assert not list(records.glob(f"{unchanged['RequestId']}.*")) and not list(
        records.glob(f"{no_delete['RequestId']}.*")
    )


async def test_a_type_with_its_own_entry_runs_it(run_daemon, stack, configured, records):
    await run_daemon(handlers=(("Custom::DnsRecord", "cfn_provider.handlers.command"),))
    create = stack.request("Create", "Rec", "Custom::DnsRecord", {"Name": "api", "Command": "dns"})
    resp = await answer(stack, create)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "cmd-api"
    assert recorded(records, create, "create")["argv"] == ["create", "typed"]  # not the `dns` entry


async def test_arguments_are_never_shell_expanded_unless_configured(run_daemon, stack, configured, records):
    await run_daemon(handlers=NAMED)
    literal = stack.request("Create", "L", "Custom::Command", {"Command": "literal"})
    shelled = stack.request("Create", "S", "Custom::Command", {"Command": "viashell", "Name": "a b; touch /tmp/x"})
    stack.publish(literal)
    stack.publish(shelled)
    assert (await response_of(stack, literal))["Status"] == "SUCCESS"
    assert recorded(records, literal, "create")["argv"] == ["create", "$HOME; echo injected"]
    assert (await response_of(stack, shelled))["Status"] == "SUCCESS"
    # The configured shell line quotes the property: it arrives as one argument, nothing runs.
    assert recorded(records, shelled, "create")["argv"] == ["create", "a b; touch /tmp/x"]


# ---------------------------------------------------------------------------------- failures


async def test_failures_are_answered_with_a_reason(run_daemon, stack, configured, records):
    await run_daemon(handlers=NAMED)
    reqs = {
        "exit": stack.request("Create", "A", "Custom::Command", {"Command": "dns", "Fail": "3"}),
        "unknown": stack.request("Create", "B", "Custom::Command", {"Command": "/bin/rm -rf /"}),
        "missing": stack.request("Create", "C", "Custom::Command", {"Name": "x"}),
        "notjson": stack.request("Create", "D", "Custom::Command", {"Command": "dns", "Print": "created ok"}),
        "array": stack.request("Create", "E", "Custom::Command", {"Command": "dns", "Print": "[1, 2]"}),
        "spam": stack.request("Create", "F", "Custom::Command", {"Command": "dns", "Spam": str(200_000)}),
        "delete": stack.request("Delete", "G", "Custom::Command", {"Command": "dns", "Fail": "1"}, physical_id="cmd-g"),
        "id": stack.request("Create", "H", "Custom::Command", {"Command": "dns", "Print": '"my-id"'}),
    }
    for req in reqs.values():
        stack.publish(req)
    got = {name: await response_of(stack, req) for name, req in reqs.items()}

    assert got["exit"]["Status"] == "FAILED"
    reason = got["exit"]["Reason"]
    assert reason.startswith("command 'dns' (create) exited with 3: ")
    assert reason.endswith("progress line 14\nerror: the zone does not exist")
    assert "progress line 6" in reason and "progress line 5" not in reason  # the last 10 lines

    assert got["unknown"]["Status"] == "FAILED"
    assert got["unknown"]["Reason"] == (
        "the Command property names no command configured on this provider; "
        "configured: dns, literal, noupdate, viashell"
    )  # never the value
    assert got["missing"]["Reason"].startswith("Custom::Command needs a Command property")
    assert "is not JSON" in got["notjson"]["Reason"]
    assert "printed a JSON list" in got["array"]["Reason"]
    assert "more than 64 KiB on stdout" in got["spam"]["Reason"]
    assert got["delete"]["Status"] == "FAILED" and got["delete"]["PhysicalResourceId"] == "cmd-g"
    assert got["delete"]["Reason"].startswith("command 'dns' (delete) exited with 1")
    assert got["id"]["Status"] == "SUCCESS" and got["id"]["PhysicalResourceId"] == "my-id"


async def test_timeout_kills_the_whole_process_group(run_daemon, stack, configured, records):
    await run_daemon(handlers=NAMED)
    req = stack.request("Create", "Slow", "Custom::Command", {"Command": "dns", "Sleep": "30", "IgnoreTerm": "1"})
    started = time.monotonic()
    resp = await answer(stack, req)
    assert resp["Status"] == "FAILED"
    assert resp["Reason"] == "command 'dns' (create) timed out after 6 s; its process group was killed"
    assert time.monotonic() - started < 25  # the 30 s sleep was cut short
    grandchild = recorded(records, req, "create")["grandchild"]
    for _ in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.1)
    assert not alive(grandchild), "a process the command started outlived the timeout"


async def test_a_short_service_timeout_shortens_the_commands(run_daemon, stack, records, tmp_path, monkeypatch):
    slow = write_config(
        tmp_path,
        f"""
[commands.slow]
create = {argv("create")}
timeout = 600
kill-grace = 0.5
env = {{ RECORD_DIR = "{records}" }}
""",
    )
    monkeypatch.setenv(CONFIG_ENV, str(slow))
    await run_daemon(handlers=NAMED)
    req = stack.request("Create", "Late", "Custom::Command", {"Command": "slow", "Sleep": "60", "ServiceTimeout": "8"})
    resp = await answer(stack, req)
    assert resp["Status"] == "FAILED"
    assert resp["Reason"].startswith("command 'slow' (create) timed out after "), resp["Reason"]
    grandchild = recorded(records, req, "create")["grandchild"]
    for _ in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.1)
    assert not alive(grandchild)


async def test_what_the_command_leaves_running_is_killed_when_it_exits(run_daemon, stack, configured, records):
    await run_daemon(handlers=NAMED)
    req = stack.request("Create", "Forgetful", "Custom::Command", {"Command": "dns", "Name": "f", "LeaveBehind": "1"})
    resp = await answer(stack, req)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == "cmd-f"
    grandchild = recorded(records, req, "create")["grandchild"]
    for _ in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.1)
    assert not alive(grandchild), "a background child of the command outlived its request"


async def test_the_command_never_sees_a_response_url_ros_intranet_included(records):
    entry = command.Entry("rec", {"create": [PY, SCRIPT, "create"]}, env={"RECORD_DIR": str(records)})
    event = {
        "RequestType": "Create",
        "RequestId": "ros-1",
        "ResourceProperties": {"Name": "x"},
        "ResponseURL": "https://ros.example/answer?sig=public",
        "IntranetResponseURL": "http://intranet/answer?sig=x",
    }
    outcome = await command.run(entry, "create", event, timeout=30)
    assert outcome.returncode == 0
    seen = json.loads((records / "ros-1.create.json").read_text())
    assert "ResponseURL" not in seen["stdin"] and "IntranetResponseURL" not in seen["stdin"]
    assert not any("sig=" in value for value in seen["env"].values())


async def test_cancelling_the_handler_kills_the_process_group(records, tmp_path):
    """What happens when the daemon gives up on a request (its deadline) or stops at once."""
    entry = command.Entry("slow", {"create": [PY, SCRIPT, "create"]}, env={"RECORD_DIR": str(records)})
    event = {"RequestType": "Create", "RequestId": "cancel-me", "ResourceProperties": {"Sleep": "60"}}
    task = asyncio.create_task(command.run(entry, "create", event, timeout=600))
    record = records / "cancel-me.create.json"
    for _ in range(100):
        if record.exists():
            break
        await asyncio.sleep(0.05)
    grandchild = json.loads(record.read_text())["grandchild"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(50):
        if not alive(grandchild):
            break
        await asyncio.sleep(0.1)
    assert not alive(grandchild)


async def test_without_configuration_every_request_fails_saying_so(run_daemon, stack, monkeypatch):
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    await run_daemon(handlers=NAMED)
    req = stack.request("Create", "X", "Custom::Command", {"Command": "dns"})
    resp = await answer(stack, req)
    assert resp["Status"] == "FAILED"
    assert resp["Reason"].startswith(f"Custom::Command is not configured on this provider: set {CONFIG_ENV}")


# ---------------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    "key, name",
    [
        ("RecordName", "RECORD_NAME"),
        ("TTL", "TTL"),
        ("dns.zone-id", "DNS_ZONE_ID"),
        ("HTTPSPort", "HTTPS_PORT"),
        ("a1B", "A1_B"),
        ("***", "_"),
    ],
)
def test_env_names(key, name):
    assert env_name(key) == name


def test_request_env_flattens_nested_values_and_drops_the_response_url():
    env = request_env(
        {
            "RequestType": "Create",
            "ResponseURL": "https://secret",
            "StackId": "arn:aws:cf:r:a:stack/s/g",
            "ResourceProperties": {"On": True, "Off": None, "List": ["a", {"B": 1}], "Nul": "a\0b"},
        }
    )
    assert not any("secret" in v for v in env.values())
    assert env["CFN_STACK_NAME"] == "s"
    assert env["CFN_RESOURCE_PROPERTIES_ON"] == "true" and env["CFN_RESOURCE_PROPERTIES_OFF"] == ""
    assert env["CFN_RESOURCE_PROPERTIES_LIST_0"] == "a" and env["CFN_RESOURCE_PROPERTIES_LIST_1_B"] == "1"
    assert env["CFN_RESOURCE_PROPERTIES_NUL"] == "ab"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[commands.a]\ndelete = ['x']\n", "has no create command"),
        ("[commands.a]\ncreate = []\n", "create must be a non-empty list"),
        ("[commands.a]\ncreate = ['x']\nshell = true\n", "must be one non-empty string when shell = true"),
        ("[commands.a]\ncreate = ['x']\ntimeout = 0\n", "timeout must be"),
        ("[commands.a]\ncreate = ['x']\nrun-as = 'root'\n", "unknown key(s) run-as"),
        ("[commands.a]\ncreate = ['x']\nenv = { A = 1 }\n", "env must be a table"),
        ("[other]\n", "unknown table(s) other"),
        ("[commands]\na = 1\n", "[commands] must hold tables"),
        ("not toml = = \n", "is not valid TOML"),
    ],
)
def test_config_mistakes_are_named(tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        load_config(str(write_config(tmp_path, text)))
    assert message in str(err.value) and "commands.toml" in str(err.value)


def test_a_string_command_is_split_without_a_shell(tmp_path):
    config = load_config(str(write_config(tmp_path, "[commands.a]\ncreate = \"/bin/tool 'two words' $X\"\n")))
    assert config.commands["a"].actions["create"] == ["/bin/tool", "two words", "$X"]
    assert config.commands["a"].shell is False and config.commands["a"].timeout == command.DEFAULT_TIMEOUT


def test_unreadable_config_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the command configuration"):
        load_config(str(tmp_path / "absent.toml"))
