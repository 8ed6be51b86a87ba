"""Every command's --help, walked through click's command tree: each option's help names its default
(or it has none, or it is required), and an option several commands share is described from one
source (cfn_provider.cli_options): the same text everywhere, a command adding at most a note of its own."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from cfn_provider import cli_options
from cfn_provider.cli import main

# Options whose name is shared by commands that mean different things by it (each says why).
DIFFERENT_MEANINGS = {
    "--topic-arn": "run and answer: the topics accepted; bootstrap: a topic to adopt; invoke: the topic to publish to",
    "--stack-name": "simulate: the simulated stack; invoke: the stack it creates through CloudFormation",
    "--dry-run": "what is not done differs by command (bootstrap's plan, redrive's moves)",
    "--visibility-timeout": "bootstrap: the queue's attribute; run: how long it keeps a message hidden",
    "--name": "bootstrap: the topic and queue; web-token: the token's tenant",
    "--timeout": "the command's own wait",
    "--property": "invoke: sent to a daemon; event: put in a printed event",
    "--properties-json": "as --property",
    "--log-level": "run: the daemon's log; local-invoke: the same lines on stderr",
    "--logical-id": "requests: a filter; event: the id put in the event",
    "--physical-id": "answer: the id answered; event: the id put in the event",
    "--region": "simulate's default is the emulator's us-east-1, not the profile's",
}


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


def options() -> Iterator[tuple[str, click.Option]]:
    for where, command in commands():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and param.name != "help":
                yield where, param


def has_no_default(option: click.Option) -> bool:
    """A flag off unless given, an option with no value unless given (click's UNSET), or none of a repeatable."""
    default = option.default
    unset = default is None or type(default).__name__ == "Sentinel"
    if option.is_flag and not option.secondary_opts:
        return unset or default is False
    return unset or (option.multiple and not default)


def test_every_option_names_its_default_or_has_none():
    unnamed = [
        f"{where} {option.opts[0]}"
        for where, option in options()
        if not (
            option.required
            or has_no_default(option)
            or option.show_default not in (None, False)
            or "default" in (option.help or "").lower()
        )
    ]
    assert unnamed == []


def test_every_visible_option_has_help():
    assert [f"{where} {option.opts[0]}" for where, option in options() if not option.help] == []


def test_a_shared_option_is_described_once():
    by_name: dict[str, list[tuple[str, str]]] = {}
    for where, option in options():
        by_name.setdefault(option.opts[0], []).append((where, option.help or ""))
    differ = {}
    for name, uses in by_name.items():
        if len(uses) < 2 or name in DIFFERENT_MEANINGS:
            continue
        shared = cli_options.SHARED.get(name)
        if shared is None:
            if len({text for _, text in uses}) > 1:
                differ[name] = uses
        elif [where for where, text in uses if text != shared and not text.startswith(shared + " ")]:
            differ[name] = uses
    assert differ == {}


@pytest.mark.parametrize(
    "argv, wanted",
    [
        (["check", "--help"], "The address the daemon (--transport web) listens on"),
        (["simulate", "delete", "--help"], "default: the only stack in ./.cfn-simulate/"),
    ],
)
def test_help_says_what_the_option_is_for_the_command(argv, wanted):
    shown = CliRunner().invoke(main, argv, terminal_width=200)
    assert shown.exit_code == 0 and wanted in " ".join(shown.output.split()), shown.output


def test_state_help_names_the_path_and_redrive_takes_its_queue_from_config(tmp_path, monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "st"))
    from importlib import reload

    import cfn_provider.cli_options as fresh

    text = reload(fresh).state_default()
    assert str(tmp_path / "st") in text
    redrive = CliRunner().invoke(main, ["redrive", "--help"], terminal_width=200)
    assert "--queue-url" in redrive.output and "[required]" not in redrive.output
    missing = CliRunner().invoke(main, ["redrive"])
    assert missing.exit_code == 2 and "--queue-url" in missing.output


def test_simulate_update_takes_its_template_once():
    shown = CliRunner().invoke(main, ["simulate", "update", "--help"], terminal_width=200)
    assert shown.exit_code == 0 and "[TEMPLATE]" in shown.output and "--template" not in shown.output


def test_invoke_errors_take_the_one_error_path(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    topic = "arn:aws:sns:us-east-1:123456789012:nowhere"
    done = CliRunner().invoke(main, ["invoke", "--topic-arn", topic, "--response-bucket", "b"])  # no credentials
    assert done.exit_code == 2 and done.stderr.startswith("cfn-provider: invoke: AWS: "), done.output
    assert "cfn-provider invoke:" not in done.stderr
