"""cfn_provider.sdk.types: a handler annotated with CustomResourceRequest / HandlerResult passes mypy
(strict), mypy flags the mistakes the types exist to catch, and the daemon serves the annotated
handler exactly like a plain one (the types change nothing at run time)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, get_type_hints

import pytest

import cfn_provider
from cfn_provider import Context, CustomResourceRequest, HandlerResult
from tests.support.aws import response_of

TYPED_HANDLER = """\
from __future__ import annotations

from typing import Any

from cfn_provider import Call, Context, CustomResourceRequest, HandlerResult, Resource


def create(event: CustomResourceRequest, context: Context) -> HandlerResult:
    size = int(event["ResourceProperties"]["Size"])   # CloudFormation sends strings
    context.log.info("thing.create", size=size, left=context.remaining())
    return {"PhysicalResourceId": f"{event['LogicalResourceId']}-{size}", "Data": {"Size": size}}


def update(event: CustomResourceRequest, context: Context) -> HandlerResult | str | None:
    old = event.get("OldResourceProperties", {})
    if event["ResourceProperties"]["Size"] != old.get("Size"):
        return create(event, context)
    return event.get("PhysicalResourceId")


async def delete(event: CustomResourceRequest) -> None:
    if event["RequestType"] == "Delete" and "PhysicalResourceId" in event:
        print(event["PhysicalResourceId"], event["StackId"], event["RequestId"], event["ResourceType"])


class Thing(Resource):
    async def create(self, props: dict[str, Any], call: Call) -> HandlerResult:
        return {"Data": {"Region": call.region or "", "Stack": call.stack_name}}
"""


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module's mypy runs, as a handler author's runs share theirs: the first
    analyses cfn_provider and its dependencies, the others only their handler.py."""
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(tmp_path: Path, source: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """mypy --strict on one handler file, as a handler author runs it: outside this repository's
    config, finding cfn_provider where it is installed (its py.typed)."""
    (tmp_path / "handler.py").write_text(source)
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            "mypy.ini",
            "--cache-dir",
            str(cache),
            "handler.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow  # mypy runs: the first analyses cfn_provider and its dependencies
def test_an_annotated_handler_passes_strict_mypy(tmp_path: Path, mypy_cache: Path):
    checked = mypy(tmp_path, TYPED_HANDLER, mypy_cache)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Success: no issues found" in checked.stdout


MISTAKES = {
    "a misspelt request key": (
        'return {"PhysicalResourceId": event["PhysicalResourceID"]}',
        'TypedDict "CustomResourceRequest" has no key "PhysicalResourceID"',
    ),
    "a misspelt result key": (
        'return {"PhysicalId": event["LogicalResourceId"]}',
        'Extra key "PhysicalId" for TypedDict "HandlerResult"',
    ),
    "a request type that never comes": (
        'return {} if event["RequestType"] == "Crate" else {"Data": {}}',
        "Non-overlapping equality check",
    ),
    "writing to the read-only properties": (
        'event["ResourceProperties"]["Size"] = "2"\n    return {}',
        'Unsupported target for indexed assignment ("Mapping[str, Any]")',
    ),
    "a Data that is not a mapping": (
        'return {"Data": ["a", "b"]}',
        'TypedDict item "Data" has type "Mapping[str, Any]"',
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_mypy_flags_a_wrong_key_or_value(tmp_path: Path, mistake: str, mypy_cache: Path):
    body, message = MISTAKES[mistake]
    source = textwrap.dedent("""\
        from cfn_provider import Context, CustomResourceRequest, HandlerResult

        def create(event: CustomResourceRequest, context: Context) -> HandlerResult:
            {body}
    """).format(body=body)
    checked = mypy(tmp_path, source, mypy_cache)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and errors[0].startswith("handler.py:4: error:"), checked.stdout
    assert message in errors[0], checked.stdout


# ---------------------------------------------------------------------------------- at run time


def test_the_types_import_from_the_top_and_describe_the_contract():
    assert "CustomResourceRequest" in cfn_provider.__all__ and "HandlerResult" in cfn_provider.__all__
    hints = get_type_hints(CustomResourceRequest)
    assert {
        "RequestType",
        "ResourceProperties",
        "OldResourceProperties",
        "PhysicalResourceId",
        "StackId",
        "RequestId",
        "LogicalResourceId",
        "ResourceType",
        "ResponseURL",
        "ServiceToken",
    } <= set(hints)
    assert CustomResourceRequest.__required_keys__ >= {
        "RequestType",
        "ResponseURL",
        "StackId",
        "RequestId",
        "LogicalResourceId",
        "ResourceType",
        "ResourceProperties",
    }
    assert {"PhysicalResourceId", "OldResourceProperties"} <= CustomResourceRequest.__optional_keys__
    assert HandlerResult.__optional_keys__ == {"PhysicalResourceId", "Data", "NoEcho"}


class Typed:
    """A plain-contract handler with annotations: the daemon passes its read-only dict as it always did."""

    seen: list[Any] = []

    @staticmethod
    def create(event: CustomResourceRequest, context: Context) -> HandlerResult:
        Typed.seen.append(event)
        size = int(event["ResourceProperties"]["Size"])
        return {"PhysicalResourceId": f"typed-{size}", "Data": {"Twice": size * 2, "Left": context.remaining() > 0}}

    @staticmethod
    def update(event: CustomResourceRequest, context: Context) -> HandlerResult | None:
        Typed.seen.append(event)
        return {"Data": {"Old": event.get("OldResourceProperties", {}).get("Size", "")}}

    @staticmethod
    async def delete(event: CustomResourceRequest) -> None:
        Typed.seen.append(event)


async def test_an_annotated_handler_is_served_like_a_plain_one(run_daemon, stack):
    Typed.seen.clear()
    await run_daemon(handlers=(("Custom::Typed", "tests.sdk.test_types:Typed"),))
    create = stack.request("Create", "Box", resource_type="Custom::Typed", properties={"Size": "21"})
    stack.publish(create)
    resp = await response_of(stack, create)
    assert resp is not None and resp["Status"] == "SUCCESS", resp
    assert resp["PhysicalResourceId"] == "typed-21" and resp["Data"] == {"Twice": 42, "Left": True}

    update = stack.request(
        "Update",
        "Box",
        resource_type="Custom::Typed",
        properties={"Size": "5"},
        old_properties={"Size": "21"},
        physical_id="typed-21",
    )
    stack.publish(update)
    resp = await response_of(stack, update)
    assert resp is not None and resp["PhysicalResourceId"] == "typed-21" and resp["Data"] == {"Old": "21"}

    delete = stack.request(
        "Delete", "Box", resource_type="Custom::Typed", properties={"Size": "5"}, physical_id="typed-21"
    )
    stack.publish(delete)
    resp = await response_of(stack, delete)
    assert resp is not None and resp["Status"] == "SUCCESS"

    assert [e["RequestType"] for e in Typed.seen] == ["Create", "Update", "Delete"]
    assert all(isinstance(e, dict) for e in Typed.seen)  # still the plain (read-only) dict
    with pytest.raises(TypeError, match="read-only"):
        Typed.seen[0]["RequestType"] = "Update"  # type: ignore[index]
