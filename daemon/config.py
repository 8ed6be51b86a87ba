"""Settings for `cfn-provider run`, and the TOML config file that can supply them.

Precedence: command line, then CFN_PROVIDER_* environment variables, then the config
file, then the defaults below.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .dialects.ros import UrlMode
from .errors import StartupError
from .functions.sandbox import Mode as FunctionSandbox
from .loops import EventLoop
from .transports import Transport
from .web_settings import WebSettings

if TYPE_CHECKING:
    import click


def default_state_dir() -> Path:
    """systemd's $STATE_DIRECTORY, else $XDG_STATE_HOME/cfn-provider, else ~/.local/state/cfn-provider."""
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "cfn-provider"


def default_state_url(daemon: str | None = None) -> str:
    """The default --state of the daemon `daemon` (its daemon_id): a SQLite file of its own in the
    state directory, named after its queue like its health file (`state-NAME-HASH.db`), so two
    daemons on one host never share one. `state.db` when no daemon is named, and whenever that file
    exists: an install from before the per-daemon default keeps its records (docs/operating.md,
    "Two daemons on one host")."""
    shared = default_state_dir() / "state.db"
    if daemon is None or shared.exists():
        return f"sqlite://{shared}"
    return f"sqlite://{default_state_dir() / f'state-{daemon_file_stem(daemon)}.db'}"


def daemon_file_stem(daemon: str) -> str:
    """`NAME-HASH` for a daemon's own files: the last part of its queue (or address) and a digest of
    its whole id (the same queue name in another account or region is another daemon)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", daemon.rstrip("/").rsplit("/", 1)[-1]).strip("-.")[:40] or "daemon"
    return f"{name}-{hashlib.sha256(daemon.encode()).hexdigest()[:8]}"


def daemon_id(
    transport: Transport = "sqs",
    queue_url: str | None = None,
    mns_endpoint: str | None = None,
    mns_queue: str | None = None,
    web_listen: str | None = None,
) -> str | None:
    """The daemon as its operator knows it: the queue it serves (`sqs URL`, `mns ENDPOINT/queues/NAME`)
    or the address it listens on (`web ADDRESS:PORT`); None when the options do not name one. `run`
    and `check` both derive it from the same options."""
    if transport == "web":
        return f"web {web_listen}" if web_listen else None
    if transport == "mns":
        if not (mns_endpoint and mns_queue):
            return None
        return f"mns {mns_endpoint.rstrip('/')}/queues/{mns_queue}"
    return f"sqs {queue_url}" if queue_url else None


def health_dir(state: str) -> Path:
    """Where health files live: beside the SQLite state file, else in the state directory."""
    if state.startswith("sqlite:///"):
        return Path(state[len("sqlite://") :]).parent
    return default_state_dir()


def health_path(state: str, explicit: str | None = None, daemon: str | None = None) -> Path:
    """The health file of the daemon `daemon` (its daemon_id): as given (--health-file), else one
    file per daemon in health_dir, named after its queue, so that daemons sharing a directory never
    report for one another. (`health.json`, with no daemon: where earlier builds wrote it, shared.)"""
    if explicit:
        return Path(explicit)
    if daemon is None:
        return health_dir(state) / "health.json"
    return health_dir(state) / f"health-{daemon_file_stem(daemon)}.json"


def health_files(state: str) -> list[Path]:
    """The daemons' health files in health_dir(state), for `check` when no daemon is named. A shared
    `health.json` left by an earlier build counts only when there is no other (after an upgrade it
    is a stale leftover beside the new daemon's own file)."""
    directory = health_dir(state)
    return sorted(directory.glob("health-*.json")) or sorted(directory.glob("health.json"))


@dataclass(frozen=True)
class Settings:
    queue_url: str
    region: str | None = None
    topic_arns: tuple[str, ...] = ()
    handlers: tuple[
        tuple[str, Any], ...
    ] = ()  # (ResourceType or pattern, "module[:attr]", object, or None: the entry point)
    handler_paths: tuple[
        str, ...
    ] = ()  # --handler-path folders handler modules are also imported from (pipeline.handler_path)
    state: str = field(default_factory=default_state_url)
    concurrency: int = 32
    visibility_timeout: int = 60
    wait_seconds: int = 20
    grace_period: float = 30.0
    verify_signatures: bool = True
    trust_signing_cert_urls: tuple[str, ...] = ()
    allow_response_urls: tuple[str, ...] = ()
    use_entry_points: bool = True
    max_backoff: float = 20.0  # longest wait between retries of SQS receives
    health_file: str | None = None  # default: beside the SQLite state file (see health_path)
    metrics_port: int | None = None  # Prometheus text endpoint; off by default
    metrics_address: str = "127.0.0.1"  # the endpoint has no authentication: loopback unless asked
    summary_interval: float = 60.0  # seconds between `summary` log lines
    transport: Transport = "sqs"  # sqs (queue_url; CloudFormation) | mns (mns_endpoint + mns_queue; ROS) | web (ROS)
    mns_endpoint: str | None = None  # https://ACCOUNT.mns.REGION.aliyuncs.com
    mns_queue: str | None = None
    mns_allow_http: bool = False  # an http:// mns_endpoint (local emulators only): refused otherwise
    mns_topics: tuple[str, ...] = ()  # acs:mns:REGION:ACCOUNT:topics/NAME: the topics whose notifications are served
    mns_allow_bare_messages: bool = False  # with mns_topics: also serve messages that are not notifications
    ros_response_url: UrlMode = "auto"  # intranet | public | auto (cfn_provider.dialects.ros.ResponseUrlChoice)
    alibaba_cloud: bool | None = None  # running inside Alibaba Cloud; None: detect (cfn_provider.dialects.ros)
    dead_letter_interval: float = 60.0  # seconds between looks in the dead-letter queue; 0: off
    poll_interval: float = 5.0  # seconds between looks in the store for due polls (long-running actions)
    event_loop: EventLoop = "auto"  # auto | asyncio | uvloop (cfn_provider.loops)
    functions: dict[str, Any] = field(default_factory=dict)  # TYPE -> FunctionSettings of its lambda: target
    tenant_handlers: tuple[str, ...] = ()  # NAME=TYPE: the handlers a tenant may use (cfn_provider.trust.tenants)
    tenant_topics: tuple[str, ...] = ()  # NAME=TOPIC: the topics whose requests are a tenant's
    function_sandbox: FunctionSandbox = "best-effort"  # best-effort | required | off (cfn_provider.functions.sandbox)
    web: WebSettings = field(default_factory=WebSettings)  # transport web: the HTTP(S) listener

    @property
    def daemon(self) -> str:
        """This daemon as `check` and the health file name it (config.daemon_id)."""
        return (
            daemon_id(
                self.transport, self.queue_url, self.mns_endpoint, self.mns_queue, f"{self.web.address}:{self.web.port}"
            )
            or "sqs (no queue)"
        )


_REPEATABLE = (
    "handler",
    "handler_path",
    "topic_arn",
    "allow_response_url",
    "trust_signing_cert_url",
    "function",
    "mns_topic",
    "web_allow_source",
    "tenant_handler",
    "tenant_topic",
)


class ConfigError(StartupError, ValueError):
    """The config file cannot be read or holds a setting that cannot be used (the message names the file)."""


def read_toml(path: str | Path, what: str, error: type[Exception] = ConfigError) -> dict[str, Any]:
    """A TOML file as a dict; `error` saying which file (`what`) and why when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} {path} is not valid TOML: {exc}") from None


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file into click's default_map (option names, dashes or underscores).

    A `[handlers]` table maps ResourceType to MODULE[:ATTR], or to `true` to serve the built-in
    or entry point registered under that name (`false`: not served), and is merged into `handler`.
    A `[functions]` table (settings of `lambda:` targets, cfn_provider.functions.settings) is merged
    into `function` as TYPE=SETTING=VALUE strings. A `[tenants.NAME]` table (`handlers`, `topics`:
    cfn_provider.trust.tenants) becomes `tenant_handler` and `tenant_topic` as NAME=VALUE strings.
    """
    doc = read_toml(path, "config file")
    doc = {k.replace("-", "_"): v for k, v in doc.items()}
    for key in _REPEATABLE:  # `topic-arn = "arn:..."` means a list of one
        if isinstance(doc.get(key), str):
            doc[key] = [doc[key]]
    table = doc.pop("handlers", {})
    if not isinstance(table, dict):
        raise ConfigError(f'config file {path}: [handlers] must be a table of TYPE = "MODULE[:ATTR]" or true')
    handlers = list(doc.pop("handler", []))
    for rtype, spec in table.items():
        if spec is True:  # the built-in / entry point registered as rtype
            handlers.append(rtype)
        elif isinstance(spec, str) and spec.strip():
            handlers.append(f"{rtype}={spec}")
        elif spec is not False:
            raise ConfigError(
                f'config file {path}: [handlers] {rtype!r} must be "MODULE[:ATTR]", true '
                "(the built-in or entry point of that name) or false"
            )
    if handlers:
        doc["handler"] = handlers
    if "functions" in doc:
        from .functions.settings import FunctionSettingError, config_strings

        try:
            doc["function"] = [*doc.get("function", []), *config_strings(doc.pop("functions"), path)]
        except FunctionSettingError as exc:
            raise ConfigError(str(exc)) from None
    _tenants(doc, str(path))
    if isinstance(doc.get("handler_path"), list):  # relative to the config file's folder, not the daemon's cwd
        doc["handler_path"] = [str(Path(path).parent / p) if isinstance(p, str) else p for p in doc["handler_path"]]
    return doc


def _tenants(doc: dict[str, Any], path: str) -> None:
    """The `[tenants]` table, if any, as `tenant_handler` and `tenant_topic` values."""
    if "tenants" in doc:
        from .trust.tenants import config_options

        for key, values in zip(
            ("tenant_handler", "tenant_topic"), config_options(doc.pop("tenants"), path), strict=True
        ):
            if values:  # only what is given: --tenant-topic is the queue transports' alone
                doc[key] = [*doc.get(key, []), *values]


def apply_config_file(ctx: click.Context, path: str, *, strict: bool) -> None:
    """`--config PATH` of a click command: the file's settings become the command's defaults (its
    flags and environment variables still win). `strict`: a setting the command does not have is
    an error (`run`); otherwise it is skipped (an operator command reading the daemon's file).
    ConfigError, a start-up error, when the file cannot be used."""
    values = load_config_file(path)
    known = {p.name for p in ctx.command.params}
    unknown = sorted(set(values) - known)
    if strict and unknown:
        known_names = ", ".join(sorted(known - {"config"}))
        raise ConfigError(f"config file {path}: unknown setting(s) {', '.join(unknown)}; known: {known_names}")
    ctx.default_map = {**(ctx.default_map or {}), **{k: v for k, v in values.items() if k in known}}
