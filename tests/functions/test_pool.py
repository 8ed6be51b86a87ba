"""cfn_provider.functions.pool: a function's processes, with real function processes."""

from __future__ import annotations

from pathlib import Path

from cfn_provider.functions.settings import parse_options
from cfn_provider.functions.target import load
from tests.support.functions import write_function

SOURCE = """
def handler(event, context):
    pass
"""


def _function(folder: Path):
    write_function(folder, SOURCE)
    return load("lambda:index.handler", "Custom::X", parse_options([f"Custom::X=code={folder}"])["Custom::X"])


async def test_closing_the_pool_waits_for_a_process_it_was_letting_go(tmp_path, host):
    """A process dropped from the pool (killed at a call's deadline, broken) is let go in the
    background; a close that comes first still waits for it, so no process outlives the pool and
    no pipe is left to an event loop that is about to close."""
    pool = host.pool(_function(tmp_path / "fn"))
    dropped = await pool.acquire(wait=False)
    assert dropped is not None
    dropped.kill()  # as a call's deadline does
    pool.release(dropped)
    assert not dropped.exited.is_set()
    await pool.close()
    assert dropped.exited.is_set() and dropped.returncode is not None
