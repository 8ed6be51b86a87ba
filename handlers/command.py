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

from collections.abc import Mapping
from typing import Any

from cfn_provider import Call, Resource
from cfn_provider.handlers._command_config import CONFIG_ENV, DEFAULT_TIMEOUT, ConfigError, Entry, load_config
from cfn_provider.handlers._command_process import CommandError, env_name, request_env, result_of, run

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_TIMEOUT",
    "Command",
    "CommandError",
    "ConfigError",
    "Entry",
    "create",
    "delete",
    "env_name",
    "handler",
    "load_config",
    "request_env",
    "run",
    "update",
]


class Command(Resource):
    """Custom::Command: the configured entry a request selects, run for create, update and delete."""

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
            raise ConfigError(
                f"{call.resource_type} needs a Command property naming one of the commands "
                f"configured on this provider: {', '.join(sorted(config.commands)) or 'none'}"
            )
        if not isinstance(name, str) or name not in config.commands:  # the value is not echoed back
            raise ConfigError(
                "the Command property names no command configured on this provider; "
                f"configured: {', '.join(sorted(config.commands)) or 'none'}"
            )
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
