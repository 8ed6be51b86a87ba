"""The worker side of a `lambda:` function's execution environment: its own interpreter, as Lambda's.

The daemon starts `python -I runtime.py` (cfn_provider.functions.process): the standard library
and the daemon's site-packages only, no PYTHONPATH, no current directory. This file imports nothing
but the standard library, and only what it must before the function loads (those names are the
only ones a function module may not take: `shadowed` refuses them by name). Then:

- fd 0 and fd 1 as the daemon gave them become the private channel (JSON lines in, JSON lines
  out; neither is inherited by processes the function starts), fd 0 is /dev/null, fd 1 joins
  fd 2 (raw output the daemon reads line by line);
- the first line in is the set-up: the memory limit (RLIMIT_DATA) is set, the process makes
  itself non-dumpable and enters its filesystem sandbox (cfn_provider.functions.confine, run by
  its path; the modules it loads are let go of again), the function's folder goes first on
  sys.path (the daemon's stock `cfnresponse`, for inline code, last), SIGINT and SIGTERM are
  ignored (the daemon decides when a call ends), the module is imported;
- then one `invoke` at a time, in the main thread, as Lambda calls a handler: `print` and the
  root logger's records go out on the channel tagged with the call; the answer itself is
  whatever the function PUTs to its ResponseURL (a loopback listener of the daemon), so nothing
  here sees it. `done` reports how the call ended (returned, raised, sys.exit, crhelper's wish
  to be polled: cfn_provider.functions.runtime_crhelper).

End of input (the daemon closed the channel, or died: SIGKILL included) ends the process at once.
"""

import json
import logging
import os
import sys
import threading
import time

TYPE_CHECKING = False  # typing is not imported here (see above): mypy alone reads these names
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from .process import Setup

MAX_TEXT = 64 * 1024  # characters of one output line or log message sent to the daemon
CO_COROUTINE = 0x80


class Channel:
    """JSON lines to the daemon, from any thread; a daemon that is gone ends this process."""

    def __init__(self, fd: int) -> None:
        self.fd, self.lock = fd, threading.Lock()
        self.call: object = None  # the id of the call being served (output is tagged with it)

    def send(self, doc: "dict[str, Any]") -> None:
        data = (json.dumps(doc, default=str, separators=(",", ":")) + "\n").encode("utf-8", "backslashreplace")
        with self.lock:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view) :]
            except OSError:
                os._exit(0)

    def text(self, op: str, text: str, **fields: object) -> None:
        if len(text) > MAX_TEXT:
            text = text[:MAX_TEXT] + " [...]"
        self.send({"op": op, "call": self.call, "text": text, **fields})


class Lines:
    """sys.stdout / sys.stderr: each complete line goes to the daemon as `out`."""

    encoding, errors, newlines = "utf-8", "backslashreplace", None

    def __init__(self, channel: Channel, stream: str) -> None:
        self.channel, self.stream, self.lock, self.partial = channel, stream, threading.Lock(), ""

    def write(self, text: object) -> int:
        text = str(text)
        with self.lock:
            lines = (self.partial + text).split("\n")
            self.partial = lines.pop()
        for line in lines:
            self.channel.text("out", line, stream=self.stream)
        return len(text)

    def flush(self) -> None:
        with self.lock:
            line, self.partial = self.partial, ""
        if line:
            self.channel.text("out", line, stream=self.stream)

    def writelines(self, lines: "Iterable[object]") -> None:
        for line in lines:
            self.write(line)

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1 if self.stream == "stdout" else 2


class Records(logging.Handler):
    """The root logger's handler (Lambda's runtime installs one too): each record goes to the daemon."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self.channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            exc = logging.Formatter().formatException(record.exc_info) if record.exc_info else None
            self.channel.text(
                "log",
                record.getMessage(),
                level=record.levelname.lower(),
                logger=record.name,
                exc=exc[-MAX_TEXT:] if exc else None,
            )
        except Exception:  # noqa: BLE001 - as logging does: say so on stderr, go on
            self.handleError(record)


class LambdaContext:
    """The `context` a Lambda handler receives; remaining time counts to the daemon's deadline
    (both processes read the same monotonic clock)."""

    function_version = "$LATEST"
    identity = None
    client_context = None

    def __init__(self, doc: "dict[str, Any]", channel: Channel) -> None:
        self.function_name = doc["function_name"]
        self.invoked_function_arn = doc["invoked_function_arn"]
        self.memory_limit_in_mb = doc["memory_limit_in_mb"]
        self.aws_request_id = doc["aws_request_id"]
        self.log_group_name = doc["log_group_name"]
        self.log_stream_name = doc["log_stream_name"]
        self._deadline, self._channel = float(doc["deadline"]), channel

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))

    def log(self, message: object) -> None:
        self._channel.text("out", str(message).rstrip("\n"), stream="stdout")

    def __repr__(self) -> str:
        return f"<LambdaContext {self.function_name} aws_request_id={self.aws_request_id}>"


class Inbox:
    """The daemon's lines, read by a thread of their own: end of input ends the process even
    while the main thread is busy in the function."""

    def __init__(self, fd: int) -> None:
        self.file = os.fdopen(fd, "rb", buffering=0)
        self.cond = threading.Condition()
        self.items: list[dict[str, Any]] = []

    def start(self) -> None:
        threading.Thread(target=self._read, name="cfn-provider-inbox", daemon=True).start()

    def first(self) -> "Setup | None":
        """The set-up line (the daemon's first), None at end of input."""
        line = self._line()
        return json.loads(line) if line else None

    def _line(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            byte_chunk = self.file.readline()
            if not byte_chunk:
                return b"".join(chunks)
            chunks.append(byte_chunk)
            if byte_chunk.endswith(b"\n"):
                return b"".join(chunks)

    def _read(self) -> None:
        while True:
            line = self._line()
            if not line.endswith(b"\n"):
                os._exit(0)  # the daemon closed the channel or is gone
            with self.cond:
                self.items.append(json.loads(line))
                self.cond.notify()

    def next(self) -> "dict[str, Any]":
        with self.cond:
            while not self.items:
                self.cond.wait()
            return self.items.pop(0)


# ---------------------------------------------------------------------------------- loading


def shadowed(code: str) -> list[str]:
    """Top-level modules in the function's folder whose names this interpreter has already loaded:
    importing them would give the loaded module instead, so they are refused by name."""
    loaded = {name.partition(".")[0] for name in sys.modules}
    try:
        entries = os.listdir(code)
    except OSError:
        return []
    found = set()
    for entry in entries:
        name, dot, suffix = entry.partition(".")
        if dot and (suffix == "py" or suffix.startswith("cpython") and suffix.endswith("so")):
            found.add(name)
        elif not dot and os.path.isfile(os.path.join(code, entry, "__init__.py")):
            found.add(name)
    return sorted(n for n in found & loaded if n.isidentifier() and n != "__main__")


def limit_memory(memory_mb: "int | None") -> None:
    """RLIMIT_DATA: heap, anonymous memory and thread stacks, close to what Lambda's memory counts.
    The `resource` module is let go of afterwards, so a function's own resource.py imports."""
    if not memory_mb:
        return
    import resource

    size = int(memory_mb) * 1024 * 1024
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (size, size))
    except PermissionError:
        raise LoadError(
            "memory_mb: the process may not set its memory limit (setrlimit is refused: under "
            "systemd, install the drop-in systemd/function-memory.conf, or remove memory_mb)"
        ) from None
    finally:
        del sys.modules["resource"]


def load(init: "Setup", channel: Channel) -> "tuple[Callable[..., object], dict[str, Any]]":
    """Import the function; its handler, or raise with the reason the daemon shows."""
    code = init["code"]
    clash = shadowed(code) if init.get("prepend", True) else []
    if clash:
        raise LoadError(
            f"{', '.join(m + '.py' for m in clash)} in {code} shadow{'s' if len(clash) == 1 else ''} "
            f"the standard module{'s' if len(clash) > 1 else ''} {', '.join(clash)}, which the "
            "function's interpreter has loaded before the function: rename "
            f"{'it' if len(clash) == 1 else 'them'} (and the imports of {'it' if len(clash) == 1 else 'them'})"
        )
    limit_memory(init.get("memory_mb"))  # before the function's folder is on the path: its resource.py is not ours
    init["confined"] = confine(init)  # before any of the function's code runs (its folder is not on the path yet)
    if init.get("prepend", True):
        sys.path[:0] = [code]
    sys.path.append(init["stock"])
    crhelper: dict[str, Any] = {}
    with open(init["crhelper"], encoding="utf-8") as fh:
        exec(compile(fh.read(), init["crhelper"], "exec"), crhelper)  # noqa: S102 - the daemon's own file
    crhelper["install"](channel)
    __import__(init["module"])
    target = sys.modules[init["module"]]
    for part in init["attr"].split("."):
        target = getattr(target, part)
    if not callable(target):
        raise LoadError(f"{init['module']}.{init['attr']} is a {type(target).__name__}, not a function")
    if getattr(getattr(target, "__code__", None), "co_flags", 0) & CO_COROUTINE:
        raise LoadError(
            f"{init['module']}.{init['attr']} is async; Lambda's Python runtime calls handlers "
            "synchronously, and so does cfn-provider (register an async handler without lambda:)"
        )
    crhelper["check_bundled"](code)
    return target, crhelper


def confine(init: "Setup") -> "dict[str, object]":
    """Non-dumpable, then the Landlock sandbox the daemon chose (cfn_provider.functions.sandbox);
    what is in force. Without Landlock the function runs anyway, unless the sandbox is required."""
    before = set(sys.modules)
    tools: dict[str, Any] = {}
    try:
        with open(init["confine"], encoding="utf-8") as fh:
            exec(compile(fh.read(), init["confine"], "exec"), tools)  # noqa: S102 - the daemon's own file
        done: dict[str, object] = {"nondumpable": tools["nondumpable"](), "landlock": 0}
        paths = init.get("sandbox")
        if paths:
            try:
                read = [*paths["read"], f"/proc/{os.getpid()}"]  # its own /proc/self, no other process's
                done["landlock"] = tools["confine"](read, paths["write"], paths["devices"], paths["listed"])
            except tools["Unconfined"] as exc:
                if paths["required"]:
                    raise LoadError(f"the function sandbox is required (--function-sandbox required): {exc}") from None
                done["unconfined"] = str(exc)
        return done
    finally:
        for name in set(sys.modules) - before:  # ctypes and its helpers: a function may bring its own
            del sys.modules[name]


class LoadError(Exception):
    """The function cannot be served as it is (the message says why)."""


# ---------------------------------------------------------------------------------- calls


def invoke(
    handler: "Callable[..., object]", message: "dict[str, Any]", channel: Channel, crhelper: "dict[str, Any]"
) -> None:
    """One call, in this (the main) thread; reports how it ended."""
    channel.call = message["call"]
    crhelper["begin"]()
    done: dict[str, object] = {"op": "done", "call": message["call"]}
    try:
        handler(message["event"], LambdaContext(message["context"], channel))
    except SystemExit as exc:
        done["exit"] = repr(exc.code)
    except MemoryError as exc:
        done.update(error="MemoryError", message=str(exc), replace=True)
    except BaseException as exc:  # noqa: BLE001 - the function's failure, reported, not ours
        logging.getLogger().error("%s: %s", type(exc).__name__, exc, exc_info=True)
        done.update(error=type(exc).__name__, message=str(exc)[:MAX_TEXT])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    done["poll"] = crhelper["poll"]()
    channel.send(done)
    channel.call = None


def main() -> None:
    protocol_in, protocol_out = os.dup(0), os.dup(1)  # non-inheritable: children never hold them
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    channel, inbox = Channel(protocol_out), Inbox(protocol_in)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout, sys.stderr = Lines(channel, "stdout"), Lines(channel, "stderr")
    import _signal  # type: ignore[import-not-found]  # the builtin under `signal`, which stays unloaded

    for sig in (_signal.SIGINT, _signal.SIGTERM):
        _signal.signal(sig, _signal.SIG_IGN)
    root = logging.getLogger()
    root.addHandler(Records(channel))
    init = inbox.first()
    if not init:
        return
    try:
        handler, crhelper = load(init, channel)
    except BaseException as exc:  # noqa: BLE001 - any failure to load is the function's, reported
        reason = str(exc) if isinstance(exc, LoadError) else f"{type(exc).__name__}: {exc}"
        channel.send({"op": "failed", "reason": reason[:4000], "import_error": isinstance(exc, ImportError)})
        return
    channel.send({"op": "ready", "pid": os.getpid(), "confined": init.get("confined")})
    if init.get("check"):
        return
    inbox.start()
    while True:
        invoke(handler, inbox.next(), channel, crhelper)


if __name__ == "__main__":
    main()
