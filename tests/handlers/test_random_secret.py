"""cfn_provider.handlers.random_secret (Custom::RandomSecret) through the real queue, SSM on the moto server."""

from __future__ import annotations

import json
import re
import string
import uuid
from pathlib import Path

import pytest

from cfn_provider.handlers import random_secret as rs
from cfn_provider.local.emulator import Stack
from tests.support.aws import response_of
from tests.support.daemons import TEST_HANDLERS

T = "Custom::RandomSecret"
NAMED = (*TEST_HANDLERS, (T, None))  # the built-in, named as an operator would


@pytest.fixture
def key_file(tmp_path: Path, monkeypatch) -> Path:
    path = tmp_path / "secret.key"
    path.write_bytes(b"k" * 16 + uuid.uuid4().bytes + uuid.uuid4().bytes)
    monkeypatch.setenv(rs.KEY_ENV, str(path))
    return path


@pytest.fixture
def no_key(monkeypatch) -> None:
    monkeypatch.delenv(rs.KEY_ENV, raising=False)


@pytest.fixture
def ssm(provider):
    return provider.emulator.client("ssm")


@pytest.fixture
def name() -> str:
    return f"/test/{uuid.uuid4().hex[:8]}/password"


def stored(ssm, parameter: str) -> str | None:
    try:
        found = ssm.get_parameter(Name=parameter, WithDecryption=True)["Parameter"]
    except ssm.exceptions.ParameterNotFound:
        return None
    assert found["Type"] == "SecureString"
    return found["Value"]


async def answer(stack, req):
    stack.publish(req)
    resp = await response_of(stack, req)
    assert resp is not None
    return resp


# ---------------------------------------------------------------------------------- with a server key


async def test_derived_secret_is_stable_in_place_and_new_on_replacement(run_daemon, stack, key_file):
    await run_daemon(handlers=NAMED)
    props = {"Length": "24", "Rotation": "1"}
    create = stack.request("Create", "Pw", T, props)
    resp = await answer(stack, create)
    assert resp["Status"] == "SUCCESS", resp
    assert resp["NoEcho"] is True
    secret, pid = resp["Data"]["Secret"], resp["PhysicalResourceId"]
    assert len(secret) == 24 and set(secret) <= set(rs.DEFAULT_ALPHABET)
    assert pid.startswith(f"{stack.name}-Pw-")
    assert re.search(f"-k{rs.key_id(key_file.read_bytes())}-b[0-9a-f]{{8}}$", pid)  # key id, then the binding
    assert secret not in pid

    # An Update that changes nothing the secret depends on (here only ServiceTimeout): same secret.
    same = stack.request("Update", "Pw", T, {**props, "ServiceTimeout": "600"}, old_properties=props, physical_id=pid)
    resp = await answer(stack, same)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == pid
    assert resp["Data"]["Secret"] == secret and resp["NoEcho"] is True

    # Rotation (or Length, or Alphabet) replaces: a new id and a new secret.
    rotated = stack.request("Update", "Pw", T, {**props, "Rotation": "2"}, old_properties=props, physical_id=pid)
    resp = await answer(stack, rotated)
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] != pid
    assert resp["Data"]["Secret"] != secret and len(resp["Data"]["Secret"]) == 24

    longer = stack.request(
        "Update", "Pw", T, {**props, "Length": "40", "Alphabet": "xy"}, old_properties=props, physical_id=pid
    )
    resp = await answer(stack, longer)
    assert resp["PhysicalResourceId"] != pid and len(resp["Data"]["Secret"]) == 40
    assert set(resp["Data"]["Secret"]) <= {"x", "y"}

    delete = stack.request("Delete", "Pw", T, props, physical_id=pid)
    resp = await answer(stack, delete)
    assert resp["Status"] == "SUCCESS" and "Data" not in resp


async def test_a_changed_server_key_fails_the_update_instead_of_changing_the_secret(run_daemon, stack, key_file):
    await run_daemon(handlers=NAMED)
    create = stack.request("Create", "Pw", T, {})
    pid = (await answer(stack, create))["PhysicalResourceId"]
    key_file.write_bytes(b"another key, at least thirty-two bytes long")
    update = stack.request("Update", "Pw", T, {"ServiceTimeout": "300"}, old_properties={}, physical_id=pid)
    resp = await answer(stack, update)
    assert resp["Status"] == "FAILED" and resp["PhysicalResourceId"] == pid
    assert "the server key changed since this secret was made" in resp["Reason"]


async def test_derived_secret_also_kept_in_ssm_and_healed_on_update(run_daemon, stack, key_file, ssm, name):
    await run_daemon(handlers=NAMED)
    props = {"ParameterName": name}
    resp = await answer(stack, stack.request("Create", "Pw", T, props))
    secret, pid = resp["Data"]["Secret"], resp["PhysicalResourceId"]
    assert resp["Data"]["ParameterName"] == name and stored(ssm, name) == secret
    assert len(secret) == 32  # the default Length

    ssm.delete_parameter(Name=name)  # removed behind the provider's back
    update = stack.request("Update", "Pw", T, {**props, "ServiceTimeout": "100"}, old_properties=props, physical_id=pid)
    resp = await answer(stack, update)
    assert resp["Status"] == "SUCCESS" and resp["Data"]["Secret"] == secret
    assert stored(ssm, name) == secret

    resp = await answer(stack, stack.request("Delete", "Pw", T, props, physical_id=pid))
    assert resp["Status"] == "SUCCESS" and stored(ssm, name) is None


# ---------------------------------------------------------------------------------- SSM only


async def test_without_a_key_ssm_keeps_the_secret(run_daemon, stack, no_key, ssm, name):
    await run_daemon(handlers=NAMED)
    props = {"ParameterName": name, "Length": "16"}
    resp = await answer(stack, stack.request("Create", "Pw", T, props))
    assert resp["Status"] == "SUCCESS", resp
    secret, pid = resp["Data"]["Secret"], resp["PhysicalResourceId"]
    assert "-k" not in pid[-10:] and stored(ssm, name) == secret and len(secret) == 16

    # ParameterName changes in place: the same secret moves, the old parameter goes.
    moved = {**props, "ParameterName": name + "-v2"}
    resp = await answer(stack, stack.request("Update", "Pw", T, moved, old_properties=props, physical_id=pid))
    assert resp["Status"] == "SUCCESS" and resp["PhysicalResourceId"] == pid
    assert resp["Data"] == {"Secret": secret, "ParameterName": name + "-v2"}
    assert stored(ssm, name + "-v2") == secret and stored(ssm, name) is None

    # Rotation replaces, reusing the parameter: the new resource owns it now ...
    rotated = {**moved, "Rotation": "2026"}
    resp = await answer(stack, stack.request("Update", "Pw", T, rotated, old_properties=moved, physical_id=pid))
    new_secret, new_pid = resp["Data"]["Secret"], resp["PhysicalResourceId"]
    assert new_pid != pid and new_secret != secret and stored(ssm, name + "-v2") == new_secret

    # ... so the Delete CloudFormation sends for the old one leaves it alone.
    resp = await answer(stack, stack.request("Delete", "Pw", T, moved, physical_id=pid))
    assert resp["Status"] == "SUCCESS" and stored(ssm, name + "-v2") == new_secret

    # The new one's Update reads the secret back; its Delete removes the parameter, twice is fine.
    resp = await answer(
        stack,
        stack.request(
            "Update", "Pw", T, {**rotated, "ServiceTimeout": "60"}, old_properties=rotated, physical_id=new_pid
        ),
    )
    assert resp["Status"] == "SUCCESS" and resp["Data"]["Secret"] == new_secret
    for _ in range(2):
        resp = await answer(stack, stack.request("Delete", "Pw", T, rotated, physical_id=new_pid))
        assert resp["Status"] == "SUCCESS" and stored(ssm, name + "-v2") is None


# ---------------------------------------------------------------------------------- failures


async def test_failure_modes(run_daemon, stack, no_key, ssm, name):
    ssm.put_parameter(Name=name, Value="someone else's", Type="SecureString", Description="hand made")
    await run_daemon(handlers=NAMED)
    reqs = {
        "nowhere": stack.request("Create", "A", T, {"Length": "8"}),
        "taken": stack.request("Create", "B", T, {"ParameterName": name}),
        "zero": stack.request("Create", "C", T, {"Length": "0", "ParameterName": name + "c"}),
        "typo": stack.request("Create", "D", T, {"Lenght": "8", "ParameterName": name + "d"}),
        "one_char": stack.request("Create", "E", T, {"Alphabet": "aaaa", "ParameterName": name + "e"}),
        "gone": stack.request(
            "Update",
            "F",
            T,
            {"ParameterName": name + "f", "ServiceTimeout": "9"},
            old_properties={"ParameterName": name + "f"},
            physical_id=f"{stack.name}-F-0123456789abcdef",
        ),
        "drop": stack.request(
            "Update",
            "G",
            T,
            {},
            old_properties={"ParameterName": name + "g"},
            physical_id=f"{stack.name}-G-0123456789abcdef",
        ),
        "foreign_id": stack.request(
            "Update", "H", T, {"ServiceTimeout": "9"}, old_properties={}, physical_id="made-elsewhere"
        ),
    }
    for req in reqs.values():
        stack.publish(req)
    got = {k: await response_of(stack, r) for k, r in reqs.items()}
    assert all(r["Status"] == "FAILED" for r in got.values()), got
    assert "give it a ParameterName (SSM), or configure a server key" in got["nowhere"]["Reason"]
    assert "already exists and is not this resource's" in got["taken"]["Reason"]
    assert stored(ssm, name) == "someone else's"
    assert got["zero"]["Reason"] == "invalid ResourceProperties: Length: must be at least 1 (minimum)"
    assert "Lenght: is not a property this resource takes" in got["typo"]["Reason"]
    assert got["one_char"]["Reason"] == "Alphabet needs at least two distinct characters"
    assert "not in an SSM parameter this resource owns" in got["gone"]["Reason"]
    assert "ParameterName cannot be removed" in got["drop"]["Reason"]
    assert "not one this handler made for this stack and logical id" in got["foreign_id"]["Reason"]
    assert not any(name in r["Reason"] for r in got.values())  # Reasons never echo a property's value
    assert not any(stored(ssm, name + s) for s in "cde")


# ---------------------------------------------------------------------------------- units


def test_derivation_is_deterministic_and_keyed():
    key = b"0123456789abcdef0123456789abcdef"
    a = rs.derive(key, "id-1", 64, string.ascii_letters)
    assert a == rs.derive(key, "id-1", 64, string.ascii_letters)
    assert a != rs.derive(key, "id-2", 64, string.ascii_letters)
    assert a != rs.derive(key[::-1], "id-1", 64, string.ascii_letters)
    assert len(rs.derive(key, "id", 1000, "01")) == 1000


def test_derivation_is_not_biased_towards_the_first_characters():
    key = b"0123456789abcdef0123456789abcdef"
    text = rs.derive(key, "bias", 60_000, "abc")  # 256 % 3 == 1: plain modulo would favour "a"
    shares = [text.count(c) / len(text) for c in "abc"]
    assert max(shares) - min(shares) < 0.02


def test_short_or_unreadable_keys_are_refused(tmp_path, monkeypatch):
    short = tmp_path / "short"
    short.write_bytes(b"too short")
    monkeypatch.setenv(rs.KEY_ENV, str(short))
    with pytest.raises(rs.SecretError, match="shorter than 32 bytes"):
        rs.load_key()
    monkeypatch.setenv(rs.KEY_ENV, str(tmp_path / "absent"))
    with pytest.raises(rs.SecretError, match="cannot read the server key"):
        rs.load_key()


def test_a_binary_key_is_counted_as_the_bytes_it_holds(tmp_path, monkeypatch):
    # 32 random bytes begin or end with a whitespace byte about one time in twenty: still a full key
    key = tmp_path / "key"
    key.write_bytes(b" " + bytes(range(65, 95)) + b"\n")
    monkeypatch.setenv(rs.KEY_ENV, str(key))
    assert rs.load_key() == key.read_bytes()


def test_random_generation_uses_the_alphabet():
    assert set(rs.generate(500, "xyz")) == {"x", "y", "z"}


# ---------------------------------------------------------------------------------- hostile templates


async def test_a_rollback_never_hands_out_another_resources_parameter(run_daemon, provider, no_key, ssm):
    """The attack of issue 12: create with your own ParameterName, update to the victim's (the
    claim fails, so the update fails), and CloudFormation's rollback Update arrives with the
    victim's name in OldResourceProperties."""
    victim_name, own_name = f"/prod/{uuid.uuid4().hex[:8]}/db/password", f"/attacker/{uuid.uuid4().hex[:8]}/x"
    victim, attacker = Stack(provider, name="prod"), Stack(provider, name="tenant")
    await run_daemon(handlers=NAMED)
    made = await answer(victim, victim.request("Create", "DbPassword", T, {"ParameterName": victim_name}))
    victim_secret, victim_id = made["Data"]["Secret"], made["PhysicalResourceId"]

    own = {"ParameterName": own_name}
    made = await answer(attacker, attacker.request("Create", "Pw", T, own))
    own_secret, own_id = made["Data"]["Secret"], made["PhysicalResourceId"]
    grab = {"ParameterName": victim_name}
    failed = await answer(attacker, attacker.request("Update", "Pw", T, grab, old_properties=own, physical_id=own_id))
    assert failed["Status"] == "FAILED" and "not this resource's" in failed["Reason"]

    # The rollback, as CloudFormation (and `cfn-provider simulate`) sends it: back to the old
    # properties, with the attempted ones as OldResourceProperties, to the id the resource has.
    rollback = attacker.request("Update", "Pw", T, own, old_properties=grab, physical_id=own_id)
    resp = await answer(attacker, rollback)
    assert resp["Status"] == "SUCCESS", resp
    assert resp["Data"]["Secret"] == own_secret != victim_secret
    assert stored(ssm, own_name) == own_secret
    assert stored(ssm, victim_name) == victim_secret
    assert (
        victim_id
        in ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Values": [victim_name]}])["Parameters"][0][
            "Description"
        ]
    )

    # Naming the victim's PhysicalResourceId (a stack can bring any id from another ServiceToken)
    # reaches nothing either: not its secret on Update, not its parameter on Delete.
    forged = attacker.request("Update", "DbPassword", T, grab, old_properties=grab, physical_id=victim_id)
    resp = await answer(attacker, forged)
    assert resp["Status"] == "FAILED" and victim_secret not in json.dumps(resp)
    resp = await answer(attacker, attacker.request("Delete", "DbPassword", T, grab, physical_id=victim_id))
    assert resp["Status"] == "SUCCESS" and stored(ssm, victim_name) == victim_secret


async def test_another_stacks_key_derived_id_derives_nothing(run_daemon, provider, key_file):
    victim, attacker = Stack(provider, name="prod"), Stack(provider, name="tenant")
    await run_daemon(handlers=NAMED)
    made = await answer(victim, victim.request("Create", "Pw", T, {"Length": "20"}))
    victim_secret, victim_id = made["Data"]["Secret"], made["PhysicalResourceId"]
    for stack, logical in ((attacker, "Pw"), (victim, "Other")):  # another stack, or another resource of it
        resp = await answer(
            stack,
            stack.request(
                "Update",
                logical,
                T,
                {"Length": "20", "ServiceTimeout": "9"},
                old_properties={"Length": "20"},
                physical_id=victim_id,
            ),
        )
        assert resp["Status"] == "FAILED" and victim_secret not in json.dumps(resp), resp
    # the same name in another account or region: the binding, not the name, decides
    twin = Stack(provider, name="prod")
    resp = await answer(
        twin,
        twin.request(
            "Update",
            "Pw",
            T,
            {"Length": "20", "ServiceTimeout": "9"},
            old_properties={"Length": "20"},
            physical_id=victim_id,
        ),
    )
    assert resp["Status"] == "FAILED" and victim_secret not in json.dumps(resp)
    assert "not made for this stack" in resp["Reason"]
    # while the resource itself still gets its secret back
    resp = await answer(
        victim,
        victim.request(
            "Update",
            "Pw",
            T,
            {"Length": "20", "ServiceTimeout": "9"},
            old_properties={"Length": "20"},
            physical_id=victim_id,
        ),
    )
    assert resp["Status"] == "SUCCESS" and resp["Data"]["Secret"] == victim_secret


def test_a_principal_other_than_the_default_is_part_of_every_derivation_and_marker():
    """Per-stack state belongs to its principal (cfn_provider.trust.tenants): the same ids under another
    principal bind, derive and mark differently; the default principal's are those of every release."""
    from types import SimpleNamespace

    from cfn_provider.sdk.call import Call

    key = bytes(range(32))
    event = {"StackId": "stack-1", "LogicalResourceId": "Db", "RequestId": "r", "ResourceType": "Custom::RandomSecret"}
    default = Call(event, SimpleNamespace(principal="default"))
    alone = Call(event)  # called without the daemon: the default principal
    team = Call(event, SimpleNamespace(principal="team-b"))
    assert rs.binding(key, default) == rs.binding(key, alone) != rs.binding(key, team)
    assert rs.tenant_part(default) == "" and rs.tenant_part(team) == "\0principal=team-b"
    pid = "stack-1-Db-0123456789abcdef-k00000000-b00000000"
    alphabet = rs.alphabet_of({})
    assert rs.derive(key, pid, 30, alphabet) != rs.derive(key, pid, 30, alphabet, rs.tenant_part(team))
    marker = rs.owner_marker(pid, team)
    owner = rs._OWNER.match(marker).groupdict()
    assert owner["principal"] == "team-b" and rs.RandomSecret._owns(owner, pid, team)
    assert not rs.RandomSecret._owns(owner, pid, default)  # another principal's parameter is never read
    old = rs._OWNER.match(rs.owner_marker(pid, default)).groupdict()  # as earlier releases wrote it
    assert (
        old["principal"] is None
        and rs.RandomSecret._owns(old, pid, default)
        and not rs.RandomSecret._owns(old, pid, team)
    )
