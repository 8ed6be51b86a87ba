"""cfn_provider.cli_errors: the one place a command's StartupError or OperatorError becomes
`cfn-provider: <message>` and its exit code; anything else keeps its traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from cfn_provider import cli
from cfn_provider.cli_errors import Commands
from cfn_provider.errors import CfnProviderError, OperatorError, Rejected, StartupError
from tests.support.cli import assert_not_started
from tests.support.daemons import REPO

CLI = Path(sys.executable).with_name("cfn-provider")


class Refusal(OperatorError):
    pass


def _group(raise_: BaseException) -> click.Group:
    """A `Commands` group whose command `go` raises `raise_`, and whose `--config` callback raises it with --early."""

    def early(_ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            raise raise_
        return value

    @click.group(cls=Commands)
    def group() -> None:
        """A group."""

    @group.command()
    @click.option("--early", is_flag=True, is_eager=True, callback=early, expose_value=False)
    def go() -> None:
        raise raise_

    @group.group()
    def nested() -> None:
        """A group in the group (as `simulate` is)."""

    @nested.command("go")
    def nested_go() -> None:
        raise raise_

    return group


def _invoke(group: click.Group, *args: str) -> Result:
    return CliRunner().invoke(group, list(args), prog_name="cfn-provider")


@pytest.mark.parametrize("where", [("go",), ("go", "--early"), ("nested", "go")], ids=["command", "callback", "nested"])
def test_a_start_up_error_anywhere_in_a_command_is_one_line_and_exit_2(where):
    result = _invoke(_group(StartupError("--state 'x': state must be sqlite:///PATH")), *where)
    assert_not_started(result, "--state 'x': state must be sqlite:///PATH")
    assert result.stderr == "cfn-provider: --state 'x': state must be sqlite:///PATH\n"


def test_an_operator_error_is_one_line_and_exit_1():
    result = _invoke(_group(Refusal("already answered: FAILED")), "go")
    assert_not_started(result, "already answered: FAILED", code=1)


def test_a_message_of_several_lines_is_said_on_one():
    result = _invoke(_group(StartupError("handler 'x' failed to load:\n  line 3\n    bad syntax\n")), "go")
    assert result.stderr == "cfn-provider: handler 'x' failed to load: line 3 bad syntax\n"


@pytest.mark.parametrize(
    "exc",
    [RuntimeError("a bug"), Rejected("not JSON"), CfnProviderError("internal")],
    ids=["bug", "internal-rejection", "base"],
)
def test_anything_else_keeps_its_traceback(exc):
    result = _invoke(_group(exc), "go")
    assert result.exception is exc  # not swallowed: click's runner holds it, a real run prints its traceback
    assert "cfn-provider:" not in result.stderr


def test_a_real_process_shows_the_traceback_of_a_bug(tmp_path):
    """Outside CliRunner: a bug in a command is a traceback and exit 1, never a tidy line."""
    script = tmp_path / "bug.py"
    script.write_text(
        "import click\n"
        "from cfn_provider.cli_errors import Commands\n"
        "@click.group(cls=Commands)\n"
        "def main():\n    pass\n"
        "@main.command()\n"
        "def go():\n    raise KeyError('Size')\n"
        "main(['go'], prog_name='cfn-provider')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr and "KeyError: 'Size'" in done.stderr


def test_cfn_provider_is_such_a_group_and_its_help_lists_the_exit_codes():
    assert isinstance(cli.main, Commands)
    text = " ".join(CliRunner().invoke(cli.main, ["--help"]).output.split())
    assert "Exit status" in text
    for line in ("0 done", "1 the command ran and failed", "2 nothing was done: a usage error, or a start-up error"):
        assert line in text, line
    run_help = " ".join(CliRunner().invoke(cli.main, ["run", "--help"]).output.split())
    assert "Exit status: 0 stopped by a signal, 1 stopped at once by a second one, 2 did not start" in run_help


# ------------------------------------------------------------------ bad starts, through the real CLI
README_RUN = [
    "run",
    "--queue-url",
    "https://sqs.eu-west-1.amazonaws.com/123456789012/cfn-provider",
    "--topic-arn",
    "arn:aws:sns:eu-west-1:123456789012:cfn-provider",
    "--handler",
    "Custom::Thing=thing",
    "--handler-path",
    ".",
]
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
NOWHERE = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", **CREDENTIALS, "AWS_REGION": "eu-west-1"}
BAD_STARTS = [
    # (id, the command line, its environment, what its one line says)
    ("readme-run-no-credentials", README_RUN, {}, "no AWS credentials for the SQS queue"),  # the region: the URL's
    (
        "run-no-region",
        ["run", "--queue-url", "http://127.0.0.1:9/123456789012/q", "--handler", "Custom::Echo"],
        CREDENTIALS,
        "no AWS region for the SQS queue: give --region or AWS_REGION, or a queue URL that names it",
    ),
    (
        "run-metrics-port-in-use",
        ["run", "--queue-url", "http://127.0.0.1:9/1/q", "--handler", "Custom::Echo", "--metrics-port", "{busy}"],
        NOWHERE,
        "--metrics-port {busy}: cannot listen on 127.0.0.1:{busy} (Address already in use)",
    ),
    (
        "run-bad-state",
        [*README_RUN[:5], "--handler", "Custom::Echo", "--state", "x"],
        NOWHERE,
        "state must be sqlite:///PATH or dynamodb://TABLE",
    ),
    ("run-no-config-file", ["run", "--config", "missing.toml"], {}, "cannot read config file missing.toml"),
    (
        "demo-without-moto",
        ["demo"],
        {"PYTHONPATH": "{no_moto}"},
        "the demo needs the emulator (moto, the demo extra: pip",
    ),
    ("bootstrap-no-region", ["bootstrap", "--name", "x"], CREDENTIALS, "no AWS region for bootstrap: give --region"),
    ("bootstrap-no-credentials", ["bootstrap", "--region", "eu-west-1"], {}, "no AWS credentials for bootstrap"),
    (
        "redrive-no-credentials",
        ["redrive", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/123456789012/q"],
        {},
        "no AWS credentials for the SQS queue",
    ),
    (
        "redrive-no-region",
        ["redrive", "--queue-url", "http://127.0.0.1:9/123456789012/q"],
        CREDENTIALS,
        "no AWS region for the SQS queue",
    ),
    ("requests-bad-state", ["requests", "--state", "dynamodb://t"], {}, "use dynamodb://TABLE"),
]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.mark.parametrize(("argv", "env", "says"), [row[1:] for row in BAD_STARTS], ids=[row[0] for row in BAD_STARTS])
def test_a_bad_start_of_any_command_is_one_line_and_exit_2(argv, env, says, tmp_path, busy_port):
    """Each command, started as a user would with something missing or wrong: `cfn-provider: <why>`,
    exit 2, at once (no AWS call is made: no credentials, no region, or an endpoint that is not there)."""
    (tmp_path / "thing.py").write_text(
        "def create(event, context):\n    pass\n\n\nupdate = delete = create\n"
    )  # README's
    (tmp_path / "no-moto" / "moto").mkdir(parents=True)
    (tmp_path / "no-moto" / "moto" / "__init__.py").write_text("raise ImportError('No module named moto')\n")
    fill = {"busy": str(busy_port), "no_moto": str(tmp_path / "no-moto")}
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),  # no ~/.aws
        "AWS_EC2_METADATA_DISABLED": "true",  # no instance role looked up on the network
        **{k: v.format(**fill) for k, v in env.items()},
    }
    done = subprocess.run(
        [str(CLI), *(a.format(**fill) for a in argv)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert_not_started(done, says.format(**fill))
