"""Custom::Command: run a command the operator configured, per action (create/update/delete).

A template can only *select* a configured command by name; it can never say what runs. The
commands live in a TOML file on the provider's machine, named by the environment variable
CFN_PROVIDER_COMMAND_CONFIG (e.g. in /etc/default/cfn-provider):

    # /etc/cfn-provider/commands.toml
    [commands.dns-record]                  # selected with `Command: dns-record`
    create = ["/usr/local/bin/dns-record", "create"]       # argv: no shell
    update = ["/usr/local/bin/dns-record", "update"]       # optional: without it, every change replaces
    delete = ["/usr/local/bin/dns-record", "delete"]       # optional: without it, Delete does nothing
    timeout = 120                          # seconds (default 300; never past the request's deadline)
    replace-on = ["Zone"]                  # properties whose change replaces (Command always does)
    pass-env = ["PATH", "HOME"]            # the daemon's variables the command sees (default PATH, LANG, LC_ALL, TZ)
    env = { DNS_API = "https://dns.internal" }             # fixed extra variables
    cwd = "/var/lib/dns"
    # shell = true                         # only then: each action is ONE string run by /bin/sh -c

    [types."Custom::DnsRecord"]            # served with --handler Custom::DnsRecord=cfn_provider.handlers.command:
    create = ["/usr/local/bin/dns-record", "create"]       # this type always runs this entry

In the template:

    Record:
      Type: Custom::Command
      Properties:
        ServiceToken: !Ref ProviderTopicArn
        Command: dns-record                # a name from [commands]; changing it replaces the resource
        Zone: example.com                  # everything reaches the command as data
        Name: www
    # !GetAtt Record.Fqdn  (from the command's Data)

The command gets:
- on stdin, the request as JSON (without ResponseURL or ROS's IntranetResponseURL: the daemon
  answers, not the command);
- flattened `CFN_*` environment variables: CFN_REQUEST_TYPE, CFN_RESOURCE_TYPE, CFN_STACK_ID,
  CFN_STACK_NAME, CFN_REQUEST_ID, CFN_LOGICAL_RESOURCE_ID, CFN_PHYSICAL_RESOURCE_ID,
  CFN_RESOURCE_PROPERTIES (JSON) and CFN_RESOURCE_PROPERTIES_<NAME> for each property, nested
  ones as CFN_RESOURCE_PROPERTIES_<NAME>_<KEY> / _<INDEX> (names upper-cased, CamelCase split:
  RecordName -> RECORD_NAME), the same for CFN_OLD_RESOURCE_PROPERTIES, and CFN_ACTION (the
  configured action being run: create, update or delete; `create` also on a replacing Update,
  with CFN_REPLACEMENT=1).

What it prints on stdout is the result: nothing (keep or derive the id), a JSON string (the
PhysicalResourceId) or a JSON object with PhysicalResourceId, Data, NoEcho. A non-zero exit
fails the request with the last lines of stderr as the Reason (so a command must not print
secrets or property values on stderr). On timeout (or when the daemon gives up on the request)
the command's whole process group is killed: SIGTERM, then SIGKILL after `kill-grace` seconds
(default 2). When the command exits, anything it left running in its process group is killed
(SIGKILL): a command must not outlive its request (start long-lived work elsewhere, e.g. with
systemd-run).

Everything the command gets from the request is the template author's to choose: properties,
OldResourceProperties (a rollback swaps them) and the PhysicalResourceId. A command that acts on
something named there must check that it made it (e.g. a tag or marker with the StackId and
logical id), as the built-in handlers do.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
from dataclasses import dataclass, field
from typing import Any, Mapping

from cfn_provider.config import read_toml
from cfn_provider import Call, Resource

CONFIG_ENV = "CFN_PROVIDER_COMMAND_CONFIG"
DEFAULT_TIMEOUT = 300.0
DEFAULT_PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
STDOUT_LIMIT = 64 * 1024
STDERR_TAIL = 16 * 1024
REASON_LINES = 10
REASON_CHARS = 1500
_ENTRY_KEYS = {"create", "update", "delete", "timeout", "shell", "cwd", "pass-env", "env", "replace-on", "kill-grace"}
_ACTIONS = ("create", "update", "delete")


class CommandError(RuntimeError):
    """The command failed, timed out, or printed something that is not a result."""


class ConfigError(RuntimeError):
    """The operator's command configuration is missing or wrong."""


@dataclass(frozen=True)
class Entry:
    name: str
    actions: Mapping[str, list[str] | str]  # argv, or one shell string when shell is on
    timeout: float = DEFAULT_TIMEOUT
    shell: bool = False
    cwd: str | None = None
    pass_env: tuple[str, ...] = DEFAULT_PASS_ENV
    env: Mapping[str, str] = field(default_factory=dict)
    replace_on: tuple[str, ...] = ()
    kill_grace: float = 2.0


@dataclass(frozen=True)
class Config:
    path: str
    commands: Mapping[str, Entry]
    types: Mapping[str, Entry]


def load_config(path: str | None = None) -> Config:
    path = path or os.environ.get(CONFIG_ENV)
    if not path:
        raise ConfigError(f"Custom::Command is not configured on this provider: set {CONFIG_ENV} "
                          "to a TOML file of [commands.NAME] entries")
    doc = read_toml(path, "the command configuration", ConfigError)
    unknown = sorted(set(doc) - {"commands", "types"})
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {', '.join(unknown)}; expected [commands.NAME] or [types.\"TYPE\"]")
    tables = {}
    for table in ("commands", "types"):
        raw = doc.get(table, {})
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise ConfigError(f"{path}: [{table}] must hold tables ([{table}.NAME])")
        tables[table] = {name: _entry(path, f"{table}.{name}", name, spec) for name, spec in raw.items()}
    return Config(path, tables["commands"], tables["types"])


def _entry(path: str, where: str, name: str, spec: dict[str, Any]) -> Entry:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{path}: [{where}] {why}")

    unknown = sorted(set(spec) - _ENTRY_KEYS)
    if unknown:
        raise bad(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_ENTRY_KEYS))}")
    shell = spec.get("shell", False)
    if not isinstance(shell, bool):
        raise bad("shell must be true or false")
    if "create" not in spec:
        raise bad("has no create command")
    actions: dict[str, list[str] | str] = {}
    for action in _ACTIONS:
        if action not in spec:
            continue
        value = spec[action]
        if shell:
            if not isinstance(value, str) or not value.strip():
                raise bad(f"{action} must be one non-empty string when shell = true")
            actions[action] = value
        else:
            if isinstance(value, str):
                value = shlex.split(value)  # split like a shell would, but nothing runs a shell
            if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
                raise bad(f"{action} must be a non-empty list of strings (argv)")
            actions[action] = value
    timeout = spec.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise bad("timeout must be a number of seconds, above 0 and at most 3600")
    grace = spec.get("kill-grace", 2.0)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= 60:
        raise bad("kill-grace must be a number of seconds, 0 to 60")
    cwd = spec.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise bad("cwd must be a string")
    pass_env = spec.get("pass-env", list(DEFAULT_PASS_ENV))
    if not isinstance(pass_env, list) or not all(isinstance(v, str) for v in pass_env):
        raise bad("pass-env must be a list of variable names")
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise bad("env must be a table of NAME = \"value\"")
    replace_on = spec.get("replace-on", [])
    if not isinstance(replace_on, list) or not all(isinstance(v, str) for v in replace_on):
        raise bad("replace-on must be a list of property names")
    return Entry(name, actions, float(timeout), shell, cwd, tuple(pass_env), dict(env), tuple(replace_on), float(grace))


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


async def run(entry: Entry, action: str, event: Mapping[str, Any], *, timeout: float,
              extra_env: Mapping[str, str] | None = None) -> Outcome:
    """Run one configured action; kill its process group when it exits, times out or is cancelled.

    The command runs in a session (process group) of its own. When the command exits, whatever it
    left running in that group (a `cmd &` it forgot) is killed too: a request's command must not
    outlive the request."""
    env = {k: os.environ[k] for k in entry.pass_env if k in os.environ}
    env.update(entry.env)
    env.update(request_env(event))
    env.update(extra_env or {})
    pipes = dict(stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                 env=env, cwd=entry.cwd, start_new_session=True)
    command = entry.actions[action]
    try:
        if entry.shell:
            proc = await asyncio.create_subprocess_shell(str(command), **pipes)
        else:
            proc = await asyncio.create_subprocess_exec(*command, **pipes)
    except OSError as exc:
        raise CommandError(f"command {entry.name!r} ({action}) could not start: {exc.strerror or exc}") from None

    assert proc.stdin and proc.stdout and proc.stderr
    tasks = [asyncio.create_task(_feed(proc.stdin, request_json(event))),
             asyncio.create_task(_collect_head(proc.stdout, STDOUT_LIMIT)),
             asyncio.create_task(_collect_tail(proc.stderr, STDERR_TAIL))]
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
        raise CommandError(f"command {entry.name!r} ({action}) timed out after {timeout:.0f} s; "
                           "its process group was killed") from None
    except BaseException:  # cancelled: the daemon gave up on the request, or is stopping now
        _kill_group(proc.pid, signal.SIGKILL)
        raise
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
    stdout, overflow = tasks[1].result() if tasks[1].done() and not tasks[1].cancelled() else (b"", False)
    stderr = tasks[2].result() if tasks[2].done() and not tasks[2].cancelled() else b""
    return Outcome(returncode, stdout, overflow, stderr)


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
        raise CommandError(f"{what} printed something that is not JSON on stdout ({exc}); "
                           "print nothing, a JSON string (the id) or an object with PhysicalResourceId/Data/NoEcho") from None
    if isinstance(doc, (str, dict)):
        return doc
    raise CommandError(f"{what} printed a JSON {type(doc).__name__}; expected a string (the id) or an object")


# ---------------------------------------------------------------------------------- the resource

class Command(Resource):
    schema = {"type": "object", "properties": {"Command": {"type": "string", "minLength": 1}}}
    replace_on = ("Command",)

    def __init__(self, config_path: str | None = None):
        self.config_path = config_path  # None: from CFN_PROVIDER_COMMAND_CONFIG at each request

    def select(self, props: Mapping[str, Any], call: Call) -> Entry:
        config = load_config(self.config_path)
        if call.resource_type in config.types:
            return config.types[call.resource_type]
        name = props.get("Command")
        if not name:
            raise ConfigError(f"{call.resource_type} needs a Command property naming one of the commands "
                              f"configured on this provider: {', '.join(sorted(config.commands)) or 'none'}")
        if not isinstance(name, str) or name not in config.commands:  # the value is not echoed back
            raise ConfigError("the Command property names no command configured on this provider; "
                              f"configured: {', '.join(sorted(config.commands)) or 'none'}")
        return config.commands[name]

    def needs_replacement(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> bool:
        if super().needs_replacement(props, old, call):
            return True
        entry = self.select(props, call)
        if "update" not in entry.actions:
            return props != old
        return any(props.get(name) != old.get(name) for name in entry.replace_on)

    async def _run(self, entry: Entry, action: str, call: Call, replacing: bool = False) -> Any:
        extra = {"CFN_ACTION": action}
        if replacing:
            extra["CFN_REPLACEMENT"] = "1"
        # Stop it in time to answer ourselves (with the better Reason) before the daemon gives up.
        timeout = max(0.1, min(entry.timeout, call.remaining() - entry.kill_grace - 0.5))
        call.log.info("command.start", command=entry.name, action=action, timeout=round(timeout, 1))
        outcome = await run(entry, action, call.event, timeout=timeout, extra_env=extra)
        return result_of(entry, action, outcome)

    async def create(self, props: dict[str, Any], call: Call) -> Any:
        return await self._run(self.select(props, call), "create", call, replacing=call.replacing)

    async def update(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> Any:
        entry = self.select(props, call)
        if "update" not in entry.actions:
            return None  # nothing changed that matters (a change would have replaced)
        return await self._run(entry, "update", call)

    async def delete(self, props: dict[str, Any], call: Call) -> Any:
        entry = self.select(props, call)
        if "delete" not in entry.actions:
            return None
        await self._run(entry, "delete", call)
        return None


handler = Command.handler()
create, update, delete = handler.create, handler.update, handler.delete
