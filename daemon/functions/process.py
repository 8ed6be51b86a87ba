"""One execution environment: a `lambda:` function's own interpreter, serving one call at a time.

`python -I runtime.py` (cfn_provider.functions.runtime) in its own session (a Ctrl-C at the
daemon's terminal or a function's killpg never reaches across), in the function's folder, with
its own environment (cfn_provider.functions.environ). The daemon talks to it over the process's
stdin and stdout (JSON lines: set-up, `invoke`; `ready` or `failed`, `out` and `log` lines,
`done`); the process's raw stderr (and fd 1, which the runtime points there) is read line by line
too. Everything the function writes becomes the daemon's log lines (cfn_provider.functions.output).

When the daemon dies, even by SIGKILL, the process reads end of input and exits. `kill` ends it
at once (a call past its deadline); `close` lets it go (end of input), then kills what lingers.
Its end is noticed by the process, not its pipes (cfn_provider.functions.exits): a child holding
its stderr never makes a crash look like a hang. Whenever it ends (a crash, a kill, a close), its
whole process group is killed: no child of a function outlives the process that started it.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from ..errors import HandlerFailure
from ..logs import get_logger
from .exits import exit_of, kill_group
from .output import Output
from .sandbox import Paths

RUNTIME = str(Path(__file__).with_name("runtime.py"))
CRHELPER = str(Path(__file__).with_name("runtime_crhelper.py"))
CONFINE = str(Path(__file__).with_name("confine.py"))
STOCK = str(Path(__file__).with_name("stock"))
MAX_MESSAGE = 16 * 1024 * 1024  # bytes of one line from the runtime (a log record, a `done`)
MAX_RAW_LINE = 64 * 1024  # bytes of one raw output line kept (the rest of it is cut)
CLOSE_WAIT = 2.0  # seconds a process gets to exit after end of input before it is killed
DRAIN = 1.0  # seconds the output of a process that has ended gets to arrive, whatever holds its pipes


class Setup(TypedDict):
    """The first line the runtime reads (cfn_provider.functions.runtime.load): how to load the function."""

    code: str  # the function's folder
    module: str  # Lambda's Handler setting: MODULE.ATTR
    attr: str
    stock: str  # the folder of the stock cfnresponse (last on the path)
    crhelper: str  # runtime_crhelper.py, executed before the function is imported
    memory_mb: int | None  # RLIMIT_DATA, in MiB
    check: bool  # load, say ready, and exit (the start-up check)
    prepend: bool  # the folder goes first on sys.path (not when it is the interpreter's own)
    confine: str  # confine.py, executed before anything of the function's (cfn_provider.functions.confine)
    sandbox: Paths | None  # what the function may reach (cfn_provider.functions.sandbox); None: no Landlock
    confined: NotRequired[dict[str, object]]  # the runtime's own note: what was in force


log = get_logger("lambda")
_calls = itertools.count(1)


class FunctionLoadError(HandlerFailure):
    """The function could not be loaded (the message is the runtime's reason)."""


class Exited(HandlerFailure):
    """The process ended while starting or serving a call."""

    def __init__(self, returncode: int | None):
        super().__init__(describe_exit(returncode))
        self.returncode = returncode


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "ended"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = {
            "SIGSEGV": "a segmentation fault",
            "SIGABRT": "an abort",
            "SIGKILL": "killed",
            "SIGBUS": "a bus error",
        }.get(name, "a signal")
        return f"was ended by {name} ({what})"
    return f"exited with status {returncode} (os._exit or a fatal error)"


def log_stream_name() -> str:
    """Lambda's per-environment log stream name: YYYY/MM/DD/[$LATEST]<32 hex>."""
    return time.strftime("%Y/%m/%d", time.gmtime()) + "/[$LATEST]" + uuid.uuid4().hex


class FunctionProcess:
    """One worker process (start it with `start`); `runtime` is the script its interpreter runs."""

    runtime = RUNTIME

    def __init__(self, name: str, init: Setup, env: dict[str, str], cwd: str, log_stream: str):
        self.name, self.init, self.env, self.cwd, self.log_stream = name, init, env, cwd, log_stream
        self.output = Output(name)
        self.proc: asyncio.subprocess.Process | None = None
        self.returncode: int | None = None
        self.exited = asyncio.Event()
        self._ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._done: asyncio.Future[dict[str, Any]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.calls = 0
        self.broken = False  # not to be given another call (it asked to be replaced, or a call was cut)

    @property
    def alive(self) -> bool:
        return self.proc is not None and not self.exited.is_set() and not self.broken

    async def start(self, timeout: float) -> None:
        """Spawn, set up, and wait for the module to load; FunctionLoadError or Exited otherwise."""
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            self.runtime,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        empty = contextvars.Context()  # the readers' lines carry the call's ids, never a spawner's
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._read_protocol(), context=empty),
            loop.create_task(self._read_raw(), context=empty),
        ]
        self._tasks.append(loop.create_task(self._watch(), context=empty))
        try:
            await self._send({**self.init})
            doc = await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except BaseException:
            self.kill()
            raise
        if doc.get("op") == "failed":
            self.kill()
            raise FunctionLoadError(str(doc.get("reason") or "the function failed to load"))

    async def invoke(self, event: dict[str, Any], context: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
        """One call: its `done` message, or Exited when the process ends first."""
        call = next(_calls)
        self.calls += 1
        self._done = asyncio.get_running_loop().create_future()
        self.output.begin(ids)
        done: dict[str, Any] | None = None
        try:
            await self._send({"op": "invoke", "call": call, "event": event, "context": context})
            done = await asyncio.shield(self._done)
            return done
        finally:
            self._done = None
            poll = done.get("poll") if isinstance(done, dict) else None
            if isinstance(poll, dict) and poll.get("no_echo") is True:  # crhelper keeps NoEcho Data for its polls
                self.output.answered(poll.get("data"))  # its values out of the call's lines, as for a NoEcho answer
            self.output.end()

    def kill(self) -> None:
        """SIGKILL to the process and every process of its group (its children and theirs)."""
        self.broken = True
        if self.proc is not None and not self.exited.is_set():  # once it has ended, its group was killed then
            kill_group(self.proc.pid)  # the group id is its pid: it was started in a session of its own

    async def close(self) -> None:
        """End of input (the runtime exits), then SIGKILL for one that lingers; waits for the end."""
        self.broken = True
        if self.proc is None:
            return
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.exited.wait(), CLOSE_WAIT)
        except TimeoutError:
            self.kill()
            await self.exited.wait()

    async def _send(self, doc: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(doc, separators=(",", ":"), default=str).encode() + b"\n")
        try:
            await self.proc.stdin.drain()
        except (ConnectionError, BrokenPipeError):
            await self.exited.wait()  # the reader reports why
            raise Exited(self.returncode) from None

    async def _watch(self) -> None:
        """The process's end: its group killed, its last output read (for at most DRAIN seconds:
        an escaped child may hold the pipes), the call or the start told, the pipes closed."""
        assert self.proc is not None
        try:
            self.returncode = await exit_of(self.proc)
        finally:
            kill_group(self.proc.pid)
            readers = self._tasks[:2]
            await asyncio.wait(readers, timeout=DRAIN)
            for task in readers:
                task.cancel()
            for future in (self._ready, self._done):
                if future is not None and not future.done():
                    future.set_exception(Exited(self.returncode))
            self.exited.set()
            transport = getattr(self.proc, "_transport", None)
            if transport is not None:
                transport.close()  # the pipes an escaped child holds: the daemon lets go of them

    async def _read_protocol(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for line in _lines(self.proc.stdout, MAX_MESSAGE):
            self._dispatch(line)

    def _dispatch(self, line: bytes) -> None:
        try:
            doc = json.loads(line)
        except ValueError:
            self.output.printed(line.decode("utf-8", "backslashreplace"), "stdout")
            return
        op = doc.get("op") if isinstance(doc, dict) else None
        if op == "out":
            self.output.printed(str(doc.get("text", "")), str(doc.get("stream") or "stdout"))
        elif op == "log":
            self.output.record(
                str(doc.get("level") or "info"), str(doc.get("text", "")), doc.get("logger"), doc.get("exc")
            )
        elif op in ("ready", "failed") and not self._ready.done():
            self._ready.set_result(doc)
        elif op == "done" and self._done is not None and not self._done.done():
            self._done.set_result(doc)

    async def _read_raw(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for line in _lines(self.proc.stderr, MAX_RAW_LINE):
            self.output.printed(line.decode("utf-8", "backslashreplace"), "stderr")


async def _lines(reader: asyncio.StreamReader, limit: int) -> AsyncIterator[bytes]:
    """Lines of `reader` (without their newline) until its end; a line over `limit` is cut there."""
    buffer, skipping = b"", False
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            if buffer and not skipping:
                yield buffer
            return
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line, buffer = buffer[:end], buffer[end + 1 :]
            if skipping:
                skipping = False
            else:
                yield line
        if len(buffer) > limit:
            if not skipping:
                yield buffer[:limit] + b" [...]"
            buffer, skipping = b"", True
