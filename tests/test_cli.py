"""`cfn-provider` command line: parsing, option sources and precedence, and early errors.

No daemon is started: `cfn_provider.cli._serve` is replaced by a function that records the Settings
it is given, and `cfn_provider.logs.configure` by one that records the log options. The last tests
run the real `_serve` on configurations that fail before any network use. A start-up error
(cfn_provider.errors.StartupError) ends `run` with exit 2 and one line, `cfn-provider: <why>`
(tests.support.cli.assert_not_started).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import get_args, get_type_hints

import pytest
from click.testing import CliRunner, Result

import cfn_provider
import cfn_provider.cli as cli
import cfn_provider.logs
from cfn_provider.config import Settings, daemon_file_stem
from cfn_provider.pipeline.router import HandlerError
from cfn_provider.stores.base import StoreConfigError
from tests.support.cli import assert_not_started
from tests.support.logging_state import kept_logging

Q = "https://sqs.eu-west-1.amazonaws.com/123456789012/cfn-provider"
Q2 = "https://sqs.us-east-1.amazonaws.com/123456789012/other"
A1 = "arn:aws:sns:eu-west-1:123456789012:one"
A2 = "arn:aws:sns:eu-west-1:123456789012:two"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("CFN_PROVIDER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))


@pytest.fixture(autouse=True)
def restore_logging():
    with kept_logging():
        yield


class Captured:
    def __init__(self) -> None:
        self.settings: list[Settings] = []
        self.log: list[tuple[str, str]] = []

    @property
    def one(self) -> Settings:
        assert len(self.settings) == 1, self.settings
        return self.settings[0]


@pytest.fixture
def captured(monkeypatch) -> Captured:
    cap = Captured()

    def fake_serve(settings: Settings) -> int:
        cap.settings.append(settings)
        return 0

    def fake_configure(fmt: str = "auto", level: str = "info", stream=None) -> None:
        cap.log.append((fmt, level))

    monkeypatch.setattr(cli, "_serve", fake_serve)
    monkeypatch.setattr(cfn_provider.logs, "configure", fake_configure)
    return cap


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli.main, list(args), prog_name="cfn-provider", env=env)


def write_config(tmp_path: Path, text: str, name: str = "provider.toml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def value_of(cap: Captured, field: str):
    if field == "log_format":
        return cap.log[0][0]
    if field == "log_level":
        return cap.log[0][1].lower()
    return getattr(cap.one, field)


# ---- help and version --------------------------------------------------------------------------


def test_top_level_help_lists_commands():
    result = invoke("--help")
    assert result.exit_code == 0, result.output
    for word in ("run", "demo", "--version", "--help"):
        assert word in result.output


DESIGN_OPTIONS = (
    "--config",
    "--queue-url",
    "--region",
    "--topic-arn",
    "--handler",
    "TYPE=MODULE[:ATTR]",
    "--state",
    "--concurrency",
    "--visibility-timeout",
    "--verify-signatures",
    "--no-verify-signatures",
    "--allow-response-url",
    "--log-format",
    "--log-level",
)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_run_help_lists_the_design_options(flag):
    result = invoke("run", flag)
    assert result.exit_code == 0, result.output
    for option in DESIGN_OPTIONS:
        assert option in result.output, option
    assert "json" in result.output and "console" in result.output
    assert "CFN_PROVIDER_" in result.output
    assert "sqlite:///" in result.output and "dynamodb://" in result.output


def test_run_help_explains_the_dead_letter_watcher():
    text = " ".join(invoke("run", "--help").output.split())
    assert "--dead-letter-interval SECONDS" in text and "dead-letter queue" in text and "0 turns it off" in text


def test_run_help_needs_no_queue_url_and_starts_nothing(captured):
    result = invoke("run", "--help")
    assert result.exit_code == 0
    assert captured.settings == [] and captured.log == []


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"cfn-provider, version {cfn_provider.__version__}"


# ---- defaults ----------------------------------------------------------------------------------


def test_defaults(captured, tmp_path, monkeypatch):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    result = invoke("run", "--queue-url", Q)
    assert result.exit_code == 0, result.output
    s = captured.one
    assert s.queue_url == Q
    assert s.region == "eu-west-1"  # none given: the one the queue URL names
    assert s.topic_arns == () and s.handlers == () and s.allow_response_urls == () and s.trust_signing_cert_urls == ()
    assert s.state == f"sqlite://{tmp_path / 'state' / ('state-' + daemon_file_stem('sqs ' + Q) + '.db')}"
    assert s.state.startswith("sqlite:///")
    assert (s.concurrency, s.visibility_timeout, s.grace_period) == (32, 60, 30.0)
    assert s.verify_signatures is True
    assert (s.wait_seconds, s.max_backoff) == (20, 20.0)
    assert captured.log == [("auto", "info")]


def test_queue_url_is_required(captured):
    result = invoke("run")
    assert result.exit_code == 2
    assert "Missing option '--queue-url'" in result.output
    assert captured.settings == []


# ---- every option from each source -------------------------------------------------------------

# (option, command line, environment, TOML (dashed keys), field, expected)
OPTIONS = [
    (
        "region",
        ["--region", "eu-west-1"],
        {"CFN_PROVIDER_REGION": "eu-west-1"},
        'region = "eu-west-1"',
        "region",
        "eu-west-1",
    ),
    (
        "topic-arn",
        ["--topic-arn", A1, "--topic-arn", A2],
        {"CFN_PROVIDER_TOPIC_ARN": f"{A1} {A2}"},
        f'topic-arn = ["{A1}", "{A2}"]',
        "topic_arns",
        (A1, A2),
    ),
    (
        "handler",
        ["--handler", "Custom::Echo=cfn_provider.handlers.echo", "--handler", "Custom::Acme*=pkg.mod:obj.attr"],
        {"CFN_PROVIDER_HANDLER": "Custom::Echo=cfn_provider.handlers.echo Custom::Acme*=pkg.mod:obj.attr"},
        'handler = ["Custom::Echo=cfn_provider.handlers.echo", "Custom::Acme*=pkg.mod:obj.attr"]',
        "handlers",
        (("Custom::Echo", "cfn_provider.handlers.echo"), ("Custom::Acme*", "pkg.mod:obj.attr")),
    ),
    (
        "state",
        ["--state", "sqlite:///var/lib/cfn/state.db"],
        {"CFN_PROVIDER_STATE": "sqlite:///var/lib/cfn/state.db"},
        'state = "sqlite:///var/lib/cfn/state.db"',
        "state",
        "sqlite:///var/lib/cfn/state.db",
    ),
    ("concurrency", ["--concurrency", "7"], {"CFN_PROVIDER_CONCURRENCY": "7"}, "concurrency = 7", "concurrency", 7),
    (
        "visibility-timeout",
        ["--visibility-timeout", "120"],
        {"CFN_PROVIDER_VISIBILITY_TIMEOUT": "120"},
        "visibility-timeout = 120",
        "visibility_timeout",
        120,
    ),
    (
        "grace-period",
        ["--grace-period", "5.5"],
        {"CFN_PROVIDER_GRACE_PERIOD": "5.5"},
        "grace-period = 5.5",
        "grace_period",
        5.5,
    ),
    (
        "verify-signatures",
        ["--no-verify-signatures"],
        {"CFN_PROVIDER_VERIFY_SIGNATURES": "false"},
        "verify-signatures = false",
        "verify_signatures",
        False,
    ),
    (
        "allow-response-url",
        ["--allow-response-url", "http://127.0.0.1:5000/", "--allow-response-url", "http://s3.local/"],
        {"CFN_PROVIDER_ALLOW_RESPONSE_URL": "http://127.0.0.1:5000/ http://s3.local/"},
        'allow-response-url = ["http://127.0.0.1:5000/", "http://s3.local/"]',
        "allow_response_urls",
        ("http://127.0.0.1:5000/", "http://s3.local/"),
    ),
    (
        "trust-signing-cert-url",
        ["--trust-signing-cert-url", "http://127.0.0.1:9/"],
        {"CFN_PROVIDER_TRUST_SIGNING_CERT_URL": "http://127.0.0.1:9/"},
        'trust-signing-cert-url = ["http://127.0.0.1:9/"]',
        "trust_signing_cert_urls",
        ("http://127.0.0.1:9/",),
    ),
    (
        "dead-letter-interval",
        ["--dead-letter-interval", "0"],
        {"CFN_PROVIDER_DEAD_LETTER_INTERVAL": "0"},
        "dead-letter-interval = 0",
        "dead_letter_interval",
        0.0,
    ),
    (
        "wait-seconds",
        ["--wait-seconds", "3"],
        {"CFN_PROVIDER_WAIT_SECONDS": "3"},
        "wait-seconds = 3",
        "wait_seconds",
        3,
    ),
    (
        "max-backoff",
        ["--max-backoff", "1.5"],
        {"CFN_PROVIDER_MAX_BACKOFF": "1.5"},
        "max-backoff = 1.5",
        "max_backoff",
        1.5,
    ),
    (
        "log-format",
        ["--log-format", "json"],
        {"CFN_PROVIDER_LOG_FORMAT": "json"},
        'log-format = "json"',
        "log_format",
        "json",
    ),
    (
        "log-level",
        ["--log-level", "debug"],
        {"CFN_PROVIDER_LOG_LEVEL": "debug"},
        'log-level = "debug"',
        "log_level",
        "debug",
    ),
]
OPTION_IDS = [o[0] for o in OPTIONS]


@pytest.mark.parametrize("name, args, env, toml, field, expected", OPTIONS, ids=OPTION_IDS)
def test_option_from_command_line(captured, name, args, env, toml, field, expected):
    result = invoke("run", "--queue-url", Q, *args)
    assert result.exit_code == 0, result.output
    assert value_of(captured, field) == expected


@pytest.mark.parametrize("name, args, env, toml, field, expected", OPTIONS, ids=OPTION_IDS)
def test_option_from_environment(captured, name, args, env, toml, field, expected):
    result = invoke("run", env={"CFN_PROVIDER_QUEUE_URL": Q, **env})
    assert result.exit_code == 0, result.output
    assert captured.one.queue_url == Q
    assert value_of(captured, field) == expected


@pytest.mark.parametrize("name, args, env, toml, field, expected", OPTIONS, ids=OPTION_IDS)
def test_option_from_config_file_dashed_keys(captured, tmp_path, name, args, env, toml, field, expected):
    config = write_config(tmp_path, f'queue-url = "{Q}"\n{toml}\n')
    result = invoke("run", "--config", config)
    assert result.exit_code == 0, result.output
    assert captured.one.queue_url == Q
    assert value_of(captured, field) == expected


@pytest.mark.parametrize("name, args, env, toml, field, expected", OPTIONS, ids=OPTION_IDS)
def test_option_from_config_file_underscored_keys(captured, tmp_path, name, args, env, toml, field, expected):
    key, _, value = toml.partition(" = ")
    config = write_config(tmp_path, f'queue_url = "{Q}"\n{key.replace("-", "_")} = {value}\n')
    result = invoke("run", "--config", config)
    assert result.exit_code == 0, result.output
    assert value_of(captured, field) == expected


def test_queue_url_from_each_source(captured, tmp_path):
    assert invoke("run", "--queue-url", Q).exit_code == 0
    assert invoke("run", env={"CFN_PROVIDER_QUEUE_URL": Q}).exit_code == 0
    assert invoke("run", "--config", write_config(tmp_path, f'queue-url = "{Q}"')).exit_code == 0
    assert [s.queue_url for s in captured.settings] == [Q, Q, Q]


def test_config_file_from_environment(captured, tmp_path):
    config = write_config(tmp_path, f'queue-url = "{Q}"\nconcurrency = 3\n')
    result = invoke("run", env={"CFN_PROVIDER_CONFIG": config})
    assert result.exit_code == 0, result.output
    assert (captured.one.queue_url, captured.one.concurrency) == (Q, 3)


def test_config_handlers_table(captured, tmp_path):
    config = write_config(
        tmp_path,
        f"""
        queue-url = "{Q}"

        [handlers]
        "Custom::Echo" = "cfn_provider.handlers.echo"
        "Custom::Acme*" = "acme.handlers:router"
    """,
    )
    result = invoke("run", "--config", config)
    assert result.exit_code == 0, result.output
    assert captured.one.handlers == (
        ("Custom::Echo", "cfn_provider.handlers.echo"),
        ("Custom::Acme*", "acme.handlers:router"),
    )


def test_config_handler_list_and_table_are_merged(captured, tmp_path):
    config = write_config(
        tmp_path,
        f"""
        queue-url = "{Q}"
        handler = ["Custom::One=mod.one"]

        [handlers]
        "Custom::Two" = "mod.two:obj"
    """,
    )
    result = invoke("run", "--config", config)
    assert result.exit_code == 0, result.output
    assert set(captured.one.handlers) == {("Custom::One", "mod.one"), ("Custom::Two", "mod.two:obj")}


def test_full_config_file(captured, tmp_path):
    config = write_config(
        tmp_path,
        f"""
        queue-url = "{Q}"
        region = "eu-west-1"
        topic-arn = ["{A1}"]
        state = "sqlite:///srv/state.db"
        concurrency = 4
        visibility-timeout = 90
        verify-signatures = false
        allow-response-url = ["http://127.0.0.1:4566/"]
        log-format = "console"
        log-level = "warning"

        [handlers]
        "Custom::Echo" = "cfn_provider.handlers.echo"
    """,
    )
    result = invoke("run", "--config", config)
    assert result.exit_code == 0, result.output
    s = captured.one
    assert (s.queue_url, s.region, s.topic_arns, s.state) == (Q, "eu-west-1", (A1,), "sqlite:///srv/state.db")
    assert (s.concurrency, s.visibility_timeout, s.verify_signatures) == (4, 90, False)
    assert s.allow_response_urls == ("http://127.0.0.1:4566/",)
    assert s.handlers == (("Custom::Echo", "cfn_provider.handlers.echo"),)
    assert captured.log == [("console", "warning")]


# ---- precedence: command line > environment > config file > default ----------------------------

# (option, command line, environment, TOML, field, from CLI, from env, from config, default)
PRECEDENCE = [
    (
        "queue-url",
        ["--queue-url", Q],
        {"CFN_PROVIDER_QUEUE_URL": Q2},
        'queue-url = "https://sqs/config"',
        "queue_url",
        Q,
        Q2,
        "https://sqs/config",
        None,
    ),
    (
        "concurrency",
        ["--concurrency", "7"],
        {"CFN_PROVIDER_CONCURRENCY": "5"},
        "concurrency = 3",
        "concurrency",
        7,
        5,
        3,
        32,
    ),
    (
        "region",
        ["--region", "cli-1"],
        {"CFN_PROVIDER_REGION": "env-1"},
        'region = "cfg-1"',
        "region",
        "cli-1",
        "env-1",
        "cfg-1",
        None,
    ),
    (
        "topic-arn",
        ["--topic-arn", A1],
        {"CFN_PROVIDER_TOPIC_ARN": A2},
        f'topic-arn = ["{A1}", "{A2}"]',
        "topic_arns",
        (A1,),
        (A2,),
        (A1, A2),
        (),
    ),
    (
        "handler",
        ["--handler", "Custom::X=cli.mod"],
        {"CFN_PROVIDER_HANDLER": "Custom::X=env.mod"},
        '[handlers]\n"Custom::X" = "cfg.mod"',
        "handlers",
        (("Custom::X", "cli.mod"),),
        (("Custom::X", "env.mod"),),
        (("Custom::X", "cfg.mod"),),
        (),
    ),
    (
        "verify-signatures",
        ["--verify-signatures"],
        {"CFN_PROVIDER_VERIFY_SIGNATURES": "false"},
        "verify-signatures = true",
        "verify_signatures",
        True,
        False,
        True,
        True,
    ),
    (
        "verify-signatures-off",
        ["--no-verify-signatures"],
        {"CFN_PROVIDER_VERIFY_SIGNATURES": "true"},
        "verify-signatures = false",
        "verify_signatures",
        False,
        True,
        False,
        True,
    ),
    (
        "log-level",
        ["--log-level", "error"],
        {"CFN_PROVIDER_LOG_LEVEL": "warning"},
        'log-level = "debug"',
        "log_level",
        "error",
        "warning",
        "debug",
        "info",
    ),
]


@pytest.mark.parametrize(
    "name, args, env, toml, field, from_cli, from_env, from_config, default", PRECEDENCE, ids=[p[0] for p in PRECEDENCE]
)
def test_precedence(captured, tmp_path, name, args, env, toml, field, from_cli, from_env, from_config, default):
    base = [] if name == "queue-url" else ["--queue-url", Q]
    base_toml = "" if name == "queue-url" else f'queue-url = "{Q}"\n'
    config = write_config(tmp_path, base_toml + toml + "\n")

    cases = [
        ("cli beats env and config", ["--config", config, *args], env, from_cli),
        ("env beats config", ["--config", config], env, from_env),
        ("config beats default", ["--config", config], {}, from_config),
    ]
    if default is not None:
        cases.append(("default", [], {}, default))
    for label, cli_args, environ, expected in cases:
        captured.settings.clear()
        captured.log.clear()
        result = invoke("run", *base, *cli_args, env=environ)
        assert result.exit_code == 0, (label, result.output)
        assert value_of(captured, field) == expected, label


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "Custom::Thing:cfn_provider.handlers.echo",
        "cfn_provider.handlers.echo",
        "=cfn_provider.handlers.echo",
        "Custom::Thing=",
    ],
)
def test_bad_handler_value_is_a_usage_error(captured, value):
    result = invoke("run", "--queue-url", Q, "--handler", value)
    assert result.exit_code == 2, result.output
    assert "--handler" in result.output
    assert repr(value) in result.output or value in result.output
    assert "TYPE=MODULE[:ATTR]" in result.output
    assert captured.settings == []


def test_bad_handler_value_from_environment(captured):
    result = invoke(
        "run",
        "--queue-url",
        Q,
        env={"CFN_PROVIDER_HANDLER": "Custom::Thing=cfn_provider.handlers.echo Custom::Thing:x.y"},
    )
    assert result.exit_code == 2
    assert "TYPE=MODULE[:ATTR]" in result.output and "Custom::Thing:x.y" in result.output
    assert captured.settings == []


CONFIG_PATH = object()  # in `named` below: the config file's own path


def test_a_bad_value_in_the_config_file_is_the_option_s_usage_error(captured, tmp_path):
    """A value the option's own check refuses is click's usage error (exit 2), wherever it came from."""
    config = write_config(tmp_path, f'queue-url = "{Q}"\nhandler = ["cfn_provider.handlers.echo"]\n')
    result = invoke("run", "--config", config)
    assert result.exit_code == 2
    assert "--handler" in result.output and "TYPE=MODULE[:ATTR]" in result.output
    assert "cfn_provider.handlers.echo" in result.output
    assert captured.settings == []


@pytest.mark.parametrize(
    "entries, named",
    [
        pytest.param('handlers = "cfn_provider.handlers.echo"\n', ["[handlers]"], id="handlers-not-a-table"),
        pytest.param("bogus = 1\nconcurency = 4\n", ["bogus", "concurency", CONFIG_PATH], id="unknown-keys"),
        pytest.param('queue-urll = "x"\n', [("queue-urll", "queue_urll")], id="unknown-dashed-key"),
        pytest.param('[aws]\nregion = "eu-west-1"\n', ["aws"], id="unknown-table"),
    ],
)
def test_bad_config_entry_is_a_start_up_error_naming_it(captured, tmp_path, entries, named):
    """Every item of `named` is in the message; a tuple there is satisfied by any one of its strings."""
    config = write_config(tmp_path, f'queue-url = "{Q}"\n{entries}')
    result = invoke("run", "--config", config)
    line = assert_not_started(result)
    for name in named:
        alternatives = (config,) if name is CONFIG_PATH else name if isinstance(name, tuple) else (name,)
        assert any(text in line for text in alternatives), (name, result.output)
    assert captured.settings == []


def test_missing_config_file(captured, tmp_path):
    missing = str(tmp_path / "nope.toml")
    result = invoke("run", "--config", missing)
    line = assert_not_started(result, missing)
    assert "cannot read" in line or "No such file" in line or "does not exist" in line
    assert captured.settings == []


def test_invalid_toml(captured, tmp_path):
    config = write_config(tmp_path, 'queue-url = "unterminated\nconcurrency = = 3\n')
    result = invoke("run", "--config", config)
    assert_not_started(result, config, "TOML")
    assert captured.settings == []


def test_config_that_is_a_directory(captured, tmp_path):
    result = invoke("run", "--config", str(tmp_path))
    assert result.exit_code == 2
    assert "--config" in result.output
    assert captured.settings == []


@pytest.mark.parametrize(
    ("command", "option", "typed"),
    [
        ("run", "transport", get_type_hints(Settings)["transport"]),
        ("run", "event_loop", get_type_hints(Settings)["event_loop"]),
        ("run", "function_sandbox", get_type_hints(Settings)["function_sandbox"]),
        ("run", "ros_response_url", get_type_hints(Settings)["ros_response_url"]),
        ("run", "log_format", get_type_hints(cfn_provider.logs.configure)["fmt"]),
        ("run", "log_level", get_type_hints(cfn_provider.logs.configure)["level"]),
        ("check", "transport", get_type_hints(Settings)["transport"]),
    ],
)
def test_each_closed_setting_offers_exactly_the_values_its_type_names(command, option, typed):
    """Settings.transport, .event_loop, .ros_response_url and the log options are Literal types, which
    mypy holds the code to; the command line (click.Choice, also for the config file and the
    environment) is where an operator's string becomes one: both name the same values."""
    [param] = [p for p in cli.main.commands[command].params if p.name == option]
    assert tuple(param.type.choices) == get_args(typed) and get_args(typed)


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "0"],
        ["--concurrency", "many"],
        ["--visibility-timeout", "1"],
        ["--log-format", "xml"],
        ["--log-level", "loud"],
    ],
)
def test_out_of_range_values_are_usage_errors(captured, args):
    result = invoke("run", "--queue-url", Q, *args)
    assert result.exit_code == 2
    assert args[0] in result.output
    assert captured.settings == []


def test_out_of_range_value_in_config(captured, tmp_path):
    config = write_config(tmp_path, f'queue-url = "{Q}"\nconcurrency = 0\n')
    result = invoke("run", "--config", config)
    assert result.exit_code == 2
    assert "concurrency" in result.output
    assert captured.settings == []


# ---- the real _serve: errors found before any network use --------------------------------------


def test_relative_sqlite_state_exits_2():
    result = invoke("run", "--queue-url", Q, "--state", "sqlite://relative/path", "--log-format", "json")
    assert_not_started(result, "sqlite://relative/path", "absolute")


@pytest.mark.parametrize("state", ["dynamodb://", "postgres://db/x", "state.db"])
def test_unusable_state_url_exits_2(state):
    result = invoke("run", "--queue-url", Q, "--state", state, "--log-format", "json")
    assert_not_started(result, repr(state))


def test_handler_module_that_does_not_exist_exits_2(tmp_path):
    result = invoke(
        "run",
        "--queue-url",
        Q,
        "--state",
        f"sqlite://{tmp_path}/s.db",
        "--log-format",
        "json",
        "--handler",
        "Custom::Missing=no_such_module_for_cfn_tests",
    )
    assert_not_started(result, "no_such_module_for_cfn_tests", "Custom::Missing")


def test_handler_module_that_fails_to_import_exits_2(tmp_path, monkeypatch):
    (tmp_path / "broken_handler_for_cfn_tests.py").write_text('raise RuntimeError("database password not set")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    result = invoke(
        "run",
        "--queue-url",
        Q,
        "--state",
        f"sqlite://{tmp_path}/s.db",
        "--log-format",
        "json",
        "--handler",
        "Custom::Broken=broken_handler_for_cfn_tests",
    )
    assert_not_started(result, "broken_handler_for_cfn_tests", "database password not set")


def test_handler_without_actions_exits_2(tmp_path, monkeypatch):
    (tmp_path / "half_handler_for_cfn_tests.py").write_text("def create(event):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = invoke(
        "run",
        "--queue-url",
        Q,
        "--state",
        f"sqlite://{tmp_path}/s.db",
        "--log-format",
        "json",
        "--handler",
        "Custom::Half=half_handler_for_cfn_tests",
    )
    assert_not_started(result, "update", "delete")


def test_serve_leaves_start_up_errors_to_the_command_line():
    """`_serve` raises them, before any network use; cfn_provider.cli_errors says them, exit 2 (above)."""
    with pytest.raises(StoreConfigError, match="sqlite://relative/path"):
        cli._serve(Settings(queue_url=Q, state="sqlite://relative/path"))
    with pytest.raises(HandlerError, match="no_such_module_for_cfn_tests"):
        cli._serve(Settings(queue_url=Q, handlers=(("Custom::Missing", "no_such_module_for_cfn_tests"),)))
    with pytest.raises(HandlerError, match="no built-in or installed entry point is registered as Custom::Nope"):
        cli._serve(Settings(queue_url=Q, handlers=(("Custom::Nope", None),)))


def test_a_bad_functions_table_in_the_config_file_is_a_start_up_error(captured, tmp_path):
    config = write_config(tmp_path, f'queue-url = "{Q}"\n[functions]\n"Custom::Fn" = "lots"\n')
    assert_not_started(invoke("run", "--config", config), config, "[functions] 'Custom::Fn' must be a table")
    assert captured.settings == []


def test_run_serves_a_built_in_named_by_its_bare_type_from_every_source(captured, tmp_path):
    assert invoke("run", "--queue-url", Q, "--handler", "Custom::RandomSecret").exit_code == 0
    assert captured.settings[-1].handlers == (("Custom::RandomSecret", None),)
    config = write_config(
        tmp_path, f'queue-url = "{Q}"\n[handlers]\n"Custom::Echo" = true\n"Custom::Command" = false\n'
    )
    assert invoke("run", "--config", config).exit_code == 0
    assert captured.settings[-1].handlers == (("Custom::Echo", None),)


def test_config_file_single_strings_for_repeatable_options(tmp_path, monkeypatch):
    """`handler = "T=mod"` and `topic-arn = "arn"` in TOML mean one value, not a list of characters."""
    import click.testing

    from cfn_provider import cli

    seen = {}
    monkeypatch.setattr(cli, "_serve", lambda settings: seen.setdefault("s", settings) and 0)
    config = tmp_path / "c.toml"
    config.write_text(
        'queue-url = "https://q"\nhandler = "Custom::X=cfn_provider.handlers.echo"\ntopic-arn = "arn:t"\n'
    )
    result = click.testing.CliRunner().invoke(cli.main, ["run", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert seen["s"].handlers == (("Custom::X", "cfn_provider.handlers.echo"),)
    assert seen["s"].topic_arns == ("arn:t",)
