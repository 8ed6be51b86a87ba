"""cfn_provider.cli_errors: the one place a command's StartupError or OperatorError becomes
`cfn-provider: <message>` and its exit code; anything else keeps its traceback."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner, Result

from cfn_provider import cli
from cfn_provider.cli_errors import Commands
from cfn_provider.errors import CfnProviderError, OperatorError, Rejected, StartupError
from tests.support.cli import assert_not_started
from tests.support.daemons import REPO


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
