"""cfn_provider.local.simulate.commands: the click group as `cfn-provider simulate` registers it, its
subcommands and their options."""

from __future__ import annotations

import click
from click.testing import CliRunner

from cfn_provider.local.simulate import simulate


def test_help_documents_the_subcommands_and_options():
    group = click.Group("cfn-provider", commands=[simulate])  # as `main.add_command(simulate)` registers it
    top = CliRunner().invoke(group, ["simulate", "--help"])
    assert top.exit_code == 0 and all(word in top.output for word in ("create", "update", "delete"))
    for command, options in (
        ("create", ("--parameter", "--handler", "--endpoint", "--wait-limit", "--state-file")),
        ("update", ("[TEMPLATE]", "--parameter", "--stack-name")),
        ("delete", ("--stack-name", "--state-file")),
    ):
        result = CliRunner().invoke(group, ["simulate", command, "--help"])
        assert result.exit_code == 0 and all(o in result.output for o in options), result.output
