"""Running one configured command for a request: its environment and stdin from the request, its
process group, its bounded output, and what that output means as a handler result."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cfn_provider.errors import HandlerFailure
from cfn_provider.handlers._command_config import Entry

__all__ = ["CommandError", "Outcome", "env_name", "request_env", "request_json", "result_of", "run"]

STDOUT_LIMIT = 64 * 1024
STDERR_TAIL = 16 * 1024
REASON_LINES = 10
REASON_CHARS = 1500


class CommandError(HandlerFailure, RuntimeError):
    """The command failed, timed out, or printed something that is not a result."""

    reason_is_message = True  # the Reason is the message alone (cfn_provider.pipeline.raised)


# ---------------------------------------------------------------------------------- environment


def env_name(key: str) -> str:
    """'RecordName' -> 'RECORD_NAME', 'dns.zone-id' -> 'DNS_ZONE_ID'."""
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", key)
    return re.sub(r"[^A-Za-z0-9]+", "_", key).strip("_").upper() or "_"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = ""
    elif isinstance(value, (dict, list, tuple)):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = str(value)
    return text.replace("\0", "")


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    out.setdefault(prefix, _text(value))
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            _flatten(f"{prefix}_{env_name(str(key))}", value[key], out)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _flatten(f"{prefix}_{i}", item, out)


def request_env(event: Mapping[str, Any]) -> dict[str, str]:
    """The request as flattened CFN_* variables (never a response URL)."""
    out: dict[str, str] = {}
    for key in ("RequestType", "ResourceType", "StackId", "RequestId", "LogicalResourceId", "PhysicalResourceId"):
        if isinstance(event.get(key), str):
            out[f"CFN_{env_name(key)}"] = _text(event[key])
    stack_id = str(event.get("StackId", ""))
    parts = stack_id.split("/")
    out["CFN_STACK_NAME"] = parts[1] if len(parts) >= 3 else stack_id
    for key in ("ResourceProperties", "OldResourceProperties"):
        if isinstance(event.get(key), Mapping):
            _flatten(f"CFN_{env_name(key)}", event[key], out)
    return out


# Where the answer goes (CloudFormation's ResponseURL; ROS's, and its intranet twin): the daemon
# answers, never the command, so it never sees a URL that could answer for the resource.
RESPONSE_URL_FIELDS = ("ResponseURL", "IntranetResponseURL")


def request_json(event: Mapping[str, Any]) -> bytes:
    doc = {k: v for k, v in event.items() if k not in RESPONSE_URL_FIELDS}
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "replace")


# ---------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Outcome:
    """How a command ended: exit status, the head of stdout (and whether it overflowed), stderr's tail."""

    returncode: int
    stdout: bytes
    stdout_overflow: bool
    stderr_tail: bytes


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _collect_head(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    kept, total = bytearray(), 0
    while chunk := await stream.read(65536):
        total += len(chunk)
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept), total > limit


async def _collect_tail(stream: asyncio.StreamReader, limit: int) -> bytes:
    kept = bytearray()
    while chunk := await stream.read(65536):
        kept += chunk
        del kept[:-limit]
    return bytes(kept)


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    try:
        stdin.write(data)
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command does not read its stdin: fine
    finally:
        try:
            stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass


async def run(
    entry: Entry, action: str, event: Mapping[str, Any], *, timeout: float, extra_env: Mapping[str, str] | None = None
) -> Outcome:
    """Run one configured action; kill its process group when it exits, times out or is cancelled.

    The command runs in a session (process group) of its own. When the command exits, whatever it
    left running in that group (a `cmd &` it forgot) is killed too: a request's command must not
    outlive the request."""
    proc = await _start(entry, action, event, extra_env)
    assert proc.stdin and proc.stdout and proc.stderr
    feed = asyncio.create_task(_feed(proc.stdin, request_json(event)))
    head = asyncio.create_task(_collect_head(proc.stdout, STDOUT_LIMIT))
    tail = asyncio.create_task(_collect_tail(proc.stderr, STDERR_TAIL))
    tasks: list[asyncio.Task[Any]] = [feed, head, tail]
    limit = asyncio.timeout(max(0.0, timeout))
    try:
        async with limit:
            returncode = await _exit_of(proc)
            # What it left behind in its group goes too (and with it any pipe it held open), then the
            # output still buffered in the pipes is read.
            _kill_group(proc.pid, signal.SIGKILL)
            await asyncio.wait(tasks[1:], timeout=1.0)
    except TimeoutError:
        if not limit.expired():
            _kill_group(proc.pid, signal.SIGKILL)
            raise
        await _terminate(proc, entry.kill_grace)
        raise CommandError(
            f"command {entry.name!r} ({action}) timed out after {timeout:.0f} s; its process group was killed"
        ) from None
    except BaseException:  # cancelled: the daemon gave up on the request, or is stopping now
        _kill_group(proc.pid, signal.SIGKILL)
        raise
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
    stdout, overflow = head.result() if head.done() and not head.cancelled() else (b"", False)
    stderr = tail.result() if tail.done() and not tail.cancelled() else b""
    return Outcome(returncode, stdout, overflow, stderr)


async def _start(
    entry: Entry, action: str, event: Mapping[str, Any], extra_env: Mapping[str, str] | None
) -> asyncio.subprocess.Process:
    """The action's process, in a session of its own, with the passed-through, configured and request
    environment; CommandError when it cannot start."""
    env = {k: os.environ[k] for k in entry.pass_env if k in os.environ}
    env.update(entry.env)
    env.update(request_env(event))
    env.update(extra_env or {})
    pipes: dict[str, Any] = dict(
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=entry.cwd,
        start_new_session=True,
    )
    command = entry.actions[action]
    try:
        if entry.shell:
            return await asyncio.create_subprocess_shell(str(command), **pipes)
        return await asyncio.create_subprocess_exec(*command, **pipes)
    except OSError as exc:
        raise CommandError(f"command {entry.name!r} ({action}) could not start: {exc.strerror or exc}") from None


async def _exit_of(proc: asyncio.subprocess.Process) -> int:
    """The command's exit status as soon as it exits. Process.wait() also waits for the pipes to
    close, which a background child holding them open would put off until the timeout."""
    while proc.returncode is None:
        await asyncio.sleep(0.05)
    return proc.returncode


async def _terminate(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the group, SIGKILL it after `grace` (at once if cancelled meanwhile)."""
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except TimeoutError:
        pass
    finally:
        _kill_group(proc.pid, signal.SIGKILL)  # the leader may be gone while its children live on
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        pass


def last_lines(data: bytes) -> str:
    lines = [line.rstrip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    text = "\n".join(lines[-REASON_LINES:])
    return text[-REASON_CHARS:]


def result_of(entry: Entry, action: str, outcome: Outcome) -> Any:
    what = f"command {entry.name!r} ({action})"
    if outcome.returncode != 0:
        if outcome.returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-outcome.returncode).name}"
            except ValueError:
                how = f"was killed by signal {-outcome.returncode}"
        else:
            how = f"exited with {outcome.returncode}"
        tail = last_lines(outcome.stderr_tail)
        raise CommandError(f"{what} {how}" + (f": {tail}" if tail else " (nothing on stderr)"))
    if outcome.stdout_overflow:
        raise CommandError(f"{what} printed more than {STDOUT_LIMIT // 1024} KiB on stdout; print only the JSON result")
    text = outcome.stdout.decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CommandError(
            f"{what} printed something that is not JSON on stdout ({exc}); "
            "print nothing, a JSON string (the id) or an object with PhysicalResourceId/Data/NoEcho"
        ) from None
    if isinstance(doc, (str, dict)):
        return doc
    raise CommandError(f"{what} printed a JSON {type(doc).__name__}; expected a string (the id) or an object")
