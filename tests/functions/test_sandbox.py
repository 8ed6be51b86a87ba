"""The sandbox's edges (cfn_provider.functions.sandbox): what is kept out stays out when it sits
inside what a function may reach or is linked from it, and `--function-sandbox required` refuses
to start where there is no Landlock."""

from __future__ import annotations

import pytest

from cfn_provider import function_isolation as isolation
from cfn_provider.functions import confine, sandbox
from cfn_provider.functions.settings import parse_options
from cfn_provider.local.emulator import REGION
from tests.support.daemons import TEST_HANDLERS
from tests.support.functions import answer, event_for, load_folder, write_function

LOOK = """
import os
import cfnresponse

def look(path):
    try:
        with open(path) as fh:
            return "read: " + fh.read(20)
    except OSError as exc:
        return "refused: " + type(exc).__name__

def handler(event, context):
    paths = event["ResourceProperties"]["Paths"]
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {k: look(v) for k, v in paths.items()}, "look")
"""

needs_landlock = pytest.mark.skipif(confine.landlock_abi() == 0, reason="the kernel has no Landlock")


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """A fresh set of kept-out folders for the test (the module keeps the daemon's)."""
    monkeypatch.setattr(sandbox._State, "kept_out", set())
    monkeypatch.setattr(sandbox._State, "mode", "best-effort")
    return sandbox._State.kept_out


@needs_landlock
async def test_a_kept_out_folder_inside_the_functions_own_or_linked_from_it_stays_out(tmp_path, kept, host, executor):
    state = tmp_path / "fn" / "vendored" / "state"  # a folder kept out, inside the function's own
    state.mkdir(parents=True)
    (state / "state.db").write_text("the state")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret")
    sandbox.keep_out(outside)
    folder = write_function(tmp_path / "fn", LOOK, files={"vendored/lib.txt": "the library"})
    (folder / "link").symlink_to(outside)  # a symlink is reached only where it leads
    sandbox.keep_out(state)
    paths = {
        "Inside": str(state / "state.db"),
        "Linked": str(folder / "link" / "secret.txt"),
        "Sibling": str(folder / "vendored" / "lib.txt"),
    }
    body = await answer(load_folder(folder), event_for(Paths=paths), executor)
    assert body["Data"] == {
        "Inside": "refused: PermissionError",
        "Linked": "refused: PermissionError",
        "Sibling": "read: the library",
    }


async def test_required_without_landlock_refuses_to_start(run_daemon, tmp_path, monkeypatch, kept):
    """Where the kernel gives no Landlock (here: as if it said so), `required` stops the start."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, REGION)
    monkeypatch.setattr(confine, "landlock_abi", lambda: 0)
    folder = write_function(tmp_path / "fn", LOOK)
    functions = parse_options([f"Custom::Look=code={folder}"])
    handlers = (*TEST_HANDLERS, ("Custom::Look", "lambda:index.handler"))
    with pytest.raises(isolation.SandboxUnavailable, match="--function-sandbox required, but Landlock is unavailable"):
        await run_daemon(
            handlers=handlers, functions=functions, function_sandbox="required", state=f"sqlite://{tmp_path}/s/state.db"
        )
