"""Chaos suite: hostile tenants. A template author gets nothing the operator did not give.

Whoever may create or update a stack that names the ServiceToken can send the daemon any
properties, any OldResourceProperties (through a rollback) and any PhysicalResourceId (a stack
can bring one another ServiceToken answered). Each attack below is a stack such an author could
write, run through `cfn-provider simulate` (CloudFormation's create / update / rollback, its
embedded daemon on the session's moto server) or through the real SNS -> SQS queue, next to a
fake "production" the author must not reach:

- an SSM SecureString made by another stack's Custom::RandomSecret (`prod`), and a key-derived
  secret of that stack: a rollback that swaps in the victim's ParameterName, and Updates and
  Deletes that name the victim's PhysicalResourceId;
- another stack's Custom::ElasticIpPool (its Elastic IPs): Update to Size 0 and Delete under
  its PhysicalResourceId;
- built-in handlers with AWS powers the operator did not name (Custom::RandomSecret,
  Custom::ElasticIpPool, Custom::Command): a template using them gets FAILED "no handler";
- a file the operator's configured command could reach: property values that try to break
  out of a `shell = true` command's quoting, and commands the configuration does not have;
  the command never sees the response URL (ROS's IntranetResponseURL: tests/handlers), and
  leaves no process behind;
- secret-looking property values that fail a handler's schema or checks: the Reason (stack
  events) and every line the daemon logs name the property and the rule, never the value;
- ResourceTypes and RequestTypes made up per message: the metrics keep a bounded set of series;
- a ResponseURL on the attacker's own host (outside the allowlist): never called;
- a Custom::Wait Url that leaves the operator's prefix once a server or the HTTP client reads it
  (dot-segments raw or encoded, encoded slashes, a longer last segment): never fetched.

Figures (suite `hostile_tenant`, shared with the boundary attacks in their own file): attacks
tried, secrets disclosed (must be 0), foreign resources touched (0), requests to
non-allowlisted hosts (0), and the metric series a flood of made-up types added (0).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import textwrap
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import cfn_provider.local.simulate.session as simulate_session
from cfn_provider.handlers import elastic_ip_pool as eip
from cfn_provider.handlers import random_secret as rs
from cfn_provider.handlers.command import CONFIG_ENV
from cfn_provider.local.emulator import Emulator, Provider, Stack
from cfn_provider.local.simulate import simulate
from tests.chaos.conftest import Attacks, scale
from tests.support.aws import publish_all, response_of, wait_until_queue_empty
from tests.support.daemons import TEST_HANDLERS, wait_until
from tests.support.listener import ConnectionCounter

SECRET = "Hunter2-" + uuid.uuid4().hex  # a secret-looking property value
BUILT_INS = ("Custom::RandomSecret", "Custom::ElasticIpPool", "Custom::Command")
NAMED = (*TEST_HANDLERS, *((t, None) for t in BUILT_INS))
COMMAND_SCRIPT = str(Path(__file__).resolve().parents[1] / "handlers" / "command_script.py")
FLOOD = scale(40, 1000)  # made-up ResourceTypes sent at the metrics


# ---------------------------------------------------------------------------------- helpers


@pytest.fixture
def ssm(emulator: Emulator) -> Any:
    return emulator.client("ssm")


@pytest.fixture
def ec2(emulator: Emulator) -> Any:
    return emulator.client("ec2")


def stored(ssm: Any, name: str) -> str | None:
    try:
        return ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        return None


def description(ssm: Any, name: str) -> str | None:
    found = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [name]}])["Parameters"]
    return found[0].get("Description") if found else None


async def answer(stack: Stack, request: dict[str, Any]) -> dict[str, Any]:
    stack.publish(request)
    response = await response_of(stack, request)
    assert response is not None, "no response"
    return response


class Simulated:
    """`cfn-provider simulate` against the session's moto server, in this test's directory."""

    def __init__(self, emulator: Emulator, tmp_path: Path, handlers: tuple[str, ...]):
        self.emulator, self.tmp_path, self.handlers = emulator, tmp_path, handlers

    def __call__(self, *args: str, stack: str) -> tuple[int, str, str]:
        argv = [*args, "--stack-name", stack, "--endpoint", self.emulator.endpoint]
        for handler in self.handlers:
            argv += ["--handler", handler]
        result = CliRunner().invoke(simulate, argv, catch_exceptions=False)
        state = self.tmp_path / ".cfn-simulate" / f"{stack}.json"
        return result.exit_code, result.stdout + result.stderr, state.read_text() if state.exists() else ""

    def template(self, name: str, text: str) -> str:
        path = self.tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)


@pytest.fixture
def simulated(emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Simulated]:
    monkeypatch.setattr(simulate_session, "HARD_EXIT_PAST_STUCK_HANDLERS", False)
    monkeypatch.setattr("cfn_provider.logs.configure", lambda *a, **k: None)
    monkeypatch.chdir(tmp_path)
    return lambda *handlers: Simulated(emulator, tmp_path, handlers)


# ---------------------------------------------------------------------------------- 1: SSM rollback

VICTIM = """\
    Parameters:
      Name: {Type: String}
    Resources:
      DbPassword:
        Type: Custom::RandomSecret
        Properties: {ServiceToken: x, ParameterName: !Ref Name, Length: 24}
"""
TENANT = """\
    Parameters:
      Name: {Type: String}
      Tick: {Type: String, Default: "1"}
    Resources:
      Pw:
        Type: Custom::RandomSecret
        Properties: {ServiceToken: x, ParameterName: !Ref Name, Length: 24}
      Leak:
        Type: Custom::Echo
        Properties: {ServiceToken: x, Secret: !GetAtt Pw.Secret, Tick: !Ref Tick}
    Outputs:
      Leaked: {Value: !GetAtt Leak.Secret}
"""


def test_a_rollback_cannot_read_another_stacks_secure_string(simulated, ssm, attacks: Attacks, monkeypatch):
    monkeypatch.delenv(rs.KEY_ENV, raising=False)
    sim = simulated("Custom::RandomSecret", "Custom::Echo")
    rounds = scale(1, 3)
    for n in range(rounds):
        tag = uuid.uuid4().hex[:8]
        prod, own = f"/prod/{tag}/db/password", f"/tenant/{tag}/x"
        code, out, _ = sim(
            "create", sim.template("victim.yaml", VICTIM), "--parameter", f"Name={prod}", stack=f"prod{tag}"
        )
        assert code == 0, out
        victim_secret, marker = stored(ssm, prod), description(ssm, prod)
        assert victim_secret and len(victim_secret) == 24

        attacks.tried("rollback swaps the victim's ParameterName into OldResourceProperties")
        tenant = sim.template("tenant.yaml", TENANT)
        code, out1, _ = sim("create", tenant, "--parameter", f"Name={own}", stack=f"tenant{tag}")
        assert code == 0, out1
        # The update asks for the victim's parameter: the claim fails, CloudFormation rolls back.
        code, out2, _ = sim("update", "--template", tenant, "--parameter", f"Name={prod}", stack=f"tenant{tag}")
        assert "UPDATE_ROLLBACK_COMPLETE" in out2, out2
        # Then any update re-reads Pw.Secret into Leak (an Echo: Data without NoEcho), shown as an output.
        code, out3, state = sim(
            "update",
            "--template",
            tenant,
            "--parameter",
            f"Name={own}",
            "--parameter",
            f"Tick={n + 2}",
            stack=f"tenant{tag}",
        )
        assert code == 0, out3
        own_secret = stored(ssm, own)
        assert attacks.disclosed(out1, out2, out3, state, own_secret or "", secrets=[victim_secret]) == 0
        assert attacks.touched(stored(ssm, prod) != victim_secret or description(ssm, prod) != marker) == 0
        assert own_secret and own_secret in state  # the tenant's own secret is theirs to read


# ---------------------------------------------------------------------------------- 2: forged ids


async def test_naming_another_stacks_physical_resource_id_reaches_nothing(
    run_daemon, provider: Provider, ssm, ec2, tmp_path: Path, monkeypatch, attacks: Attacks
):
    key = tmp_path / "server.key"
    key.write_bytes(os.urandom(32))
    await run_daemon(handlers=NAMED)
    prod, tenant = Stack(provider, name="prod"), Stack(provider, name="tenant")

    # production: an SSM-kept secret, a key-derived one, an Elastic IP pool, all of the prod stack
    monkeypatch.delenv(rs.KEY_ENV, raising=False)
    name = f"/prod/{uuid.uuid4().hex[:8]}/db"
    kept = await answer(prod, prod.request("Create", "Db", "Custom::RandomSecret", {"ParameterName": name}))
    monkeypatch.setenv(rs.KEY_ENV, str(key))
    derived = await answer(prod, prod.request("Create", "Api", "Custom::RandomSecret", {"Length": "30"}))
    pool = await answer(prod, prod.request("Create", "Egress", "Custom::ElasticIpPool", {"Size": "2"}))
    assert {kept["Status"], derived["Status"], pool["Status"]} == {"SUCCESS"}
    secrets = [kept["Data"]["Secret"], derived["Data"]["Secret"]]
    addresses = ec2.describe_addresses(
        Filters=[{"Name": f"tag:{eip.POOL_TAG}", "Values": [pool["PhysicalResourceId"]]}]
    )
    before = sorted((a["AllocationId"], json.dumps(a.get("Tags"), sort_keys=True)) for a in addresses["Addresses"])

    def forged(kind: str, logical: str, rtype: str, props: dict[str, Any], physical_id: str) -> dict[str, Any]:
        old = props if kind == "Update" else None
        return tenant.request(
            kind,
            logical,
            rtype,
            {**props, "ServiceTimeout": "30"} if old else props,
            old_properties=old,
            physical_id=physical_id,
        )

    tries = [
        forged("Update", "Db", "Custom::RandomSecret", {"ParameterName": name}, kept["PhysicalResourceId"]),
        forged("Delete", "Db", "Custom::RandomSecret", {"ParameterName": name}, kept["PhysicalResourceId"]),
        forged("Update", "Api", "Custom::RandomSecret", {"Length": "30"}, derived["PhysicalResourceId"]),
        forged("Update", "Egress", "Custom::ElasticIpPool", {"Size": "0"}, pool["PhysicalResourceId"]),
        forged("Delete", "Egress", "Custom::ElasticIpPool", {"Size": "2"}, pool["PhysicalResourceId"]),
    ]
    for _ in range(scale(1, 3)):
        for request in tries:
            attacks.tried(f"{request['RequestType']} {request['ResourceType']} under a foreign id")
            request = {**request, "RequestId": str(uuid.uuid4())}
            request["ResponseURL"] = tenant.response_url(f"tenant/{request['RequestId']}")
            response = await answer(tenant, request)
            assert attacks.disclosed(json.dumps(response), secrets=secrets) == 0, response

    addresses = ec2.describe_addresses(
        Filters=[{"Name": f"tag:{eip.POOL_TAG}", "Values": [pool["PhysicalResourceId"]]}]
    )
    after = sorted((a["AllocationId"], json.dumps(a.get("Tags"), sort_keys=True)) for a in addresses["Addresses"])
    touched = (after != before) + (stored(ssm, name) != secrets[0])
    assert attacks.touched(touched) == 0


# ---------------------------------------------------------------------------------- 3: not named

UNINVITED = {
    "Custom::RandomSecret": "{ServiceToken: x, ParameterName: %(prod)s}",
    "Custom::ElasticIpPool": "{ServiceToken: x, Size: 3}",
    "Custom::Command": "{ServiceToken: x, Command: wipe}",
}


def test_built_ins_the_operator_did_not_name_are_not_served(
    simulated, ssm, ec2, tmp_path: Path, monkeypatch, attacks: Attacks
):
    prod = f"/prod/{uuid.uuid4().hex[:8]}/db"
    ssm.put_parameter(Name=prod, Value=SECRET, Type="SecureString", Description="made by hand")
    victim_file = tmp_path / "production.txt"
    victim_file.write_text("keep me")
    commands = tmp_path / "commands.toml"
    commands.write_text(f'[commands.wipe]\ncreate = ["rm", "-f", "{victim_file}"]\n')
    monkeypatch.setenv(CONFIG_ENV, str(commands))
    eips = len(ec2.describe_addresses()["Addresses"])
    sim = simulated("Custom::Echo")  # the operator named Custom::Echo only

    for rtype, props in UNINVITED.items():
        attacks.tried(f"a template uses {rtype}, which the operator did not name")
        template = (
            f"Resources:\n  Fine: {{Type: Custom::Echo, Properties: {{ServiceToken: x}}}}\n"
            f"  Uninvited: {{Type: {rtype}, DependsOn: Fine, Properties: {props % {'prod': prod}}}}\n"
        )
        stack = f"uninvited-{rtype.partition('::')[2].lower()}"
        code, out, state = sim("create", sim.template(f"{stack}.yaml", template), stack=stack)
        # simulate refuses the template before anything runs (no stack, no request); the daemon's own
        # answer to an unnamed type, FAILED "no handler", is tests/integration/test_bad_input.py's last row
        assert code == 2 and f"no --handler serves {rtype}" in out and "nothing was run" in out, out
        assert state == "", state
        assert attacks.disclosed(out, state, secrets=[SECRET]) == 0
    touched = (
        (stored(ssm, prod) != SECRET)
        + (not victim_file.exists())
        + (len(ec2.describe_addresses()["Addresses"]) != eips)
    )
    assert attacks.touched(touched) == 0


# ---------------------------------------------------------------------------------- 4: the command


async def test_property_values_cannot_steer_a_configured_command(
    run_daemon, stack: Stack, tmp_path: Path, monkeypatch, attacks: Attacks
):
    victim_file = tmp_path / "production.txt"
    victim_file.write_text("keep me")
    records = tmp_path / "records"
    records.mkdir()
    notes = tmp_path / "notes"
    notes.mkdir()
    commands = tmp_path / "commands.toml"
    commands.write_text(
        textwrap.dedent(f"""
        [commands.note]                  # an operator's shell command that quotes what it is given
        shell = true
        create = 'printf "%s" "$CFN_RESOURCE_PROPERTIES_TEXT" > "$NOTES/$CFN_LOGICAL_RESOURCE_ID"'
        env = {{ NOTES = "{notes}" }}

        [commands.record]                # records what it sees (stdin, environment) and forgets a child
        create = {json.dumps([sys.executable, COMMAND_SCRIPT, "create"])}
        env = {{ RECORD_DIR = "{records}" }}
    """)
    )
    monkeypatch.setenv(CONFIG_ENV, str(commands))
    await run_daemon(handlers=NAMED)
    breakouts = [
        f'"; rm -f {victim_file}; echo "',
        f"$(rm -f {victim_file})",
        f"`rm -f {victim_file}`",
        f"' ; rm -f {victim_file} ; '",
        f"\n rm -f {victim_file}",
    ]
    selections = ["/bin/rm", f"rm -f {victim_file}", "../note", "note; rm", "NOTE"]
    requests = [
        stack.request("Create", f"Note{i}", "Custom::Command", {"Command": "note", "Text": text})
        for i, text in enumerate(breakouts)
    ]
    requests += [
        stack.request("Create", f"Pick{i}", "Custom::Command", {"Command": pick}) for i, pick in enumerate(selections)
    ]
    recorded = stack.request("Create", "Rec", "Custom::Command", {"Command": "record", "Name": "r", "LeaveBehind": "1"})
    requests.append(recorded)
    attacks.tried("property values against a configured command", len(requests))
    responses = [await answer(stack, request) for request in requests]
    assert [r["Status"] for r in responses[: len(breakouts)]] == ["SUCCESS"] * len(breakouts), responses
    assert [(notes / f"Note{i}").read_text() for i in range(len(breakouts))] == breakouts  # data stayed data
    assert all(
        r["Status"] == "FAILED" and "names no command configured" in r["Reason"] for r in responses[len(breakouts) : -1]
    ), responses
    assert responses[-1]["Status"] == "SUCCESS", responses[-1]
    assert attacks.touched(not victim_file.exists()) == 0

    seen = json.loads((records / f"{recorded['RequestId']}.create.json").read_text())
    text = json.dumps(seen)
    assert "ResponseURL" not in seen["stdin"] and "IntranetResponseURL" not in seen["stdin"]
    signature = recorded["ResponseURL"].partition("?")[2]
    assert signature and signature not in text  # no response URL in stdin or the environment
    grandchild = seen["grandchild"]
    wait_until(lambda: not _alive(grandchild), 5, "the command's forgotten child to be killed")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


# ---------------------------------------------------------------------------------- 5: Reasons and logs


def test_secret_looking_values_never_reach_reasons_or_logs(spawn, stack: Stack, tmp_path: Path, attacks: Attacks):
    commands = tmp_path / "commands.toml"
    commands.write_text('[commands.dns]\ncreate = ["true"]\n')
    daemon = spawn(
        "tenant",
        *(arg for t in BUILT_INS for arg in ("--handler", t)),
        "--log-level",
        "debug",
        env={CONFIG_ENV: str(commands), rs.KEY_ENV: ""},
    )
    bad = [
        ("Custom::RandomSecret", {"Length": SECRET}),  # type
        ("Custom::RandomSecret", {"ParameterName": f"/x {SECRET}"}),  # pattern
        ("Custom::RandomSecret", {"Alphabet": SECRET * 40, "ParameterName": "/x"}),  # maxLength
        ("Custom::RandomSecret", {"Rotation": SECRET, "Lenght": SECRET}),  # additionalProperties
        ("Custom::RandomSecret", {"Length": "8", "Alphabet": "aaaa", "ParameterName": f"/{SECRET}"}),
        ("Custom::ElasticIpPool", {"Size": SECRET}),  # type
        ("Custom::ElasticIpPool", {"Size": "1", "Tags": [{"Key": f"aws:{SECRET}", "Value": SECRET}]}),  # reserved
        ("Custom::ElasticIpPool", {"Size": "1", "Tags": [{"Key": SECRET}]}),  # required
        ("Custom::Command", {"Command": SECRET}),  # not configured
    ]
    requests = [stack.request("Create", f"Bad{i}", rtype, props) for i, (rtype, props) in enumerate(bad)]
    for request in requests:
        stack.publish(request)
    attacks.tried("secret-looking values that fail validation", len(requests))
    bodies = []
    for request in requests:
        response = stack.response(request, timeout=30)
        assert response is not None and response["Status"] == "FAILED", (request["ResourceProperties"], response)
        bodies.append(json.dumps(response))
    wait_until(
        lambda: sum(e.get("event") == "request" for e in daemon.events()) >= len(requests),
        15,
        "a request line for each",
    )
    logs = daemon.log_path.read_text()
    assert "handler.raised" in logs and "invalid ResourceProperties" in logs  # the failures were logged
    assert attacks.disclosed(*bodies, logs, secrets=[SECRET]) == 0, [b for b in bodies if SECRET in b]


# ---------------------------------------------------------------------------------- 6: metrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _series(port: int) -> set[str]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {line.rpartition(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


async def test_made_up_resource_types_do_not_grow_the_metrics(
    run_daemon, stack: Stack, provider: Provider, attacks: Attacks
):
    port = _free_port()
    await run_daemon(handlers=(*TEST_HANDLERS, ("Custom::Acme*", "tests.support.handlers")), metrics_port=port)
    warmup = [stack.request("Create", "W1", "Custom::Nobody"), stack.request("Create", "W2", "Custom::AcmeOne")]
    warmup[1]["RequestType"] = "Evil"
    for request in warmup:
        await answer(stack, request)
    await asyncio.sleep(0.3)
    made_up: list[str] = []

    def flood(count: int) -> list[dict[str, Any]]:
        out = []
        for i in range(count):  # every family x request type combination within the first eight
            word = uuid.uuid4().hex
            made_up.append(word)
            request = stack.request("Create", f"F{word[:8]}", f"Custom::{'Acme' if i % 2 else 'Evil'}{word}")
            request["RequestType"] = ("Create", "Update", "Delete", f"Kind{word}")[(i // 2) % 4]
            if request["RequestType"] in ("Update", "Delete"):
                request["PhysicalResourceId"] = f"p-{word}"
            out.append(request)
        return out

    async def send(requests: list[dict[str, Any]]) -> set[str]:
        publish_all(stack, requests)
        for request in requests:
            assert await response_of(stack, request, timeout=120) is not None
        await asyncio.sleep(0.3)
        return await asyncio.to_thread(_series, port)

    attacks.tried("made-up ResourceTypes and RequestTypes against the metrics", 1)
    first = await send(flood(8))  # the legitimate label combinations appear once
    after = await send(flood(FLOOD))
    added = after - first
    attacks.figures.add("metric_series_added_by_flood", len(added))
    assert added == set(), sorted(added)[:10]
    assert not any(word in series for word in made_up for series in after)
    assert any('resource_type="Custom::Acme*"' in series for series in after)


# ---------------------------------------------------------------------------------- 7: ResponseURL


async def test_a_response_url_on_the_attackers_host_is_never_called(
    run_daemon, stack: Stack, provider: Provider, attacks: Attacks
):
    await run_daemon(handlers=NAMED)
    with ConnectionCounter() as attacker:
        requests = []
        for i, rtype in enumerate(("Custom::Echo", "Custom::RandomSecret", "Custom::Nobody")):
            request = stack.request("Create", f"Out{i}", rtype, {"Colour": "blue"})
            request["ResponseURL"] = attacker.url(
                f"/cloudformation-custom-resource-response-useast1/{i}?X-Amz-Signature=x"
            )
            requests.append(request)
        attacks.tried("ResponseURL on the attacker's own host", len(requests))
        for request in requests:
            stack.publish(request)
        await wait_until_queue_empty(provider, timeout=30)
        await asyncio.sleep(0.5)
        assert attacks.stray(attacker.connections) == 0


# ---------------------------------------------------------------------------------- 8: Custom::Wait's prefix

WAIT_ESCAPES = [
    "/healthz/../admin",
    "/healthz/%2e%2e/admin",
    "/healthzz-internal",
    "/healthz/%2E%2E/admin",
    "/healthz/..;/admin",
    "/healthz/%252e%252e/admin",
    "/healthz%2F..%2Fadmin",
    "/healthz/..%5Cadmin",
    "/healthz/./../admin",
]


async def test_custom_wait_never_fetches_outside_the_operators_prefix(
    run_daemon, stack: Stack, monkeypatch, attacks: Attacks
):
    """Issue 21 item 3: the operator lets Custom::Wait look at /healthz on a host of theirs; a
    template's Url that a server (or the HTTP client, normalising it) would read as another path is
    refused before any connection, and its Create is answered FAILED naming the rule."""
    from cfn_provider.handlers import wait

    with ConnectionCounter() as host:
        monkeypatch.setenv(wait.URLS_ENV, host.url("/healthz"))
        requests = []
        for i, path in enumerate(WAIT_ESCAPES):
            requests.append(stack.request("Create", f"Probe{i}", "Custom::Wait", {"Url": host.url(path)}))
            attacks.tried(f"Custom::Wait Url {path}")
        publish_all(stack, requests)
        await run_daemon(handlers=(*TEST_HANDLERS, ("Custom::Wait", None)), poll_interval=0.5)
        for request in requests:
            response = await response_of(stack, request)
            assert response is not None and response["Status"] == "FAILED", response
            assert "Url is not under a prefix" in response["Reason"] and "admin" not in response["Reason"]
        assert attacks.stray(host.connections) == 0
