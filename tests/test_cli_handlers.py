"""`cfn-provider handlers`: what `run` would serve, from where, for which ResourceTypes."""

from __future__ import annotations

import importlib.metadata
import json
import os
import textwrap

import pytest
from click.testing import CliRunner, Result

import cfn_provider.cli as cli
from cfn_provider.pipeline import router as router_module
from cfn_provider.pipeline.router import ENTRY_POINT_GROUP

BUILT_IN = {
    "Custom::Command": "cfn_provider.handlers.command",
    "Custom::Echo": "cfn_provider.handlers.echo",
    "Custom::ElasticIpPool": "cfn_provider.handlers.elastic_ip_pool",
    "Custom::RandomSecret": "cfn_provider.handlers.random_secret",
    "Custom::Wait": "cfn_provider.handlers.wait",
}
FX = "tests.support.router_fixtures"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("CFN_PROVIDER_"):
            monkeypatch.delenv(name)


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli.main, ["handlers", *args], prog_name="cfn-provider", env=env)


def rows(result: Result) -> list[dict]:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_built_ins_are_listed_as_available_and_not_served_by_default():
    got = {r["resource_type"]: r for r in rows(invoke("--json"))}
    for rtype, spec in BUILT_IN.items():
        assert got[rtype]["handler"] == spec and got[rtype]["source"] == "built-in"
        assert got[rtype]["served"] is False and got[rtype]["why"] == "available, not named"
    text = invoke().stdout
    assert text.startswith("no handlers served")
    assert "available, NOT served (serve one with --handler TYPE):" in text
    assert any(
        line.split()[:2] == ["Custom::RandomSecret", "cfn_provider.handlers.random_secret"]
        for line in text.splitlines()
    )


def test_table_is_sorted_exact_types_then_patterns_longest_first():
    result = invoke(
        "--handler",
        f"Custom::*={FX}:short_glob",
        "--handler",
        f"Custom::Acme*={FX}:long_glob",
        "--handler",
        f"Custom::Aaa={FX}:exact",
        "--handler",
        "Custom::Echo",
    )
    assert result.exit_code == 0, result.output
    served, _, available = result.stdout.partition("\n\n")
    lines = served.splitlines()
    assert lines[0].split() == ["RESOURCE", "TYPE", "HANDLER", "FROM", "SERVED", "BECAUSE"]
    types = [line.split()[0] for line in lines[1:]]
    assert types == ["Custom::Aaa", "Custom::Echo", "Custom::Acme*", "Custom::*"]
    acme = next(line for line in lines if line.startswith("Custom::Acme* (pattern) "))
    assert acme.split()[2:] == [f"{FX}:long_glob", "module", "named", "with", "--handler"]
    echo = next(line for line in lines if line.startswith("Custom::Echo "))
    assert echo.split()[1:3] == ["cfn_provider.handlers.echo", "built-in"]
    assert "Custom::Echo" not in available and "Custom::RandomSecret" in available
    assert (
        invoke("--handler", f"Custom::*={FX}:short_glob").stdout
        == invoke("--handler", f"Custom::*={FX}:short_glob").stdout
    )


def test_config_file_and_environment_handlers_are_listed_with_where_they_were_named(tmp_path):
    config = tmp_path / "provider.toml"
    config.write_text(
        textwrap.dedent(f"""
        queue-url = "https://sqs.eu-west-1.amazonaws.com/123456789012/q"   # settings of `run` are ignored here
        concurrency = 4
        [handlers]
        "Custom::Echo" = "{FX}:exact"
        "Custom::Acme*" = "{FX}:long_glob"
        "Custom::RandomSecret" = true
        "Custom::Command" = false
    """)
    )
    got = {r["resource_type"]: r for r in rows(invoke("--config", str(config), "--json"))}
    assert got["Custom::Echo"] == {
        "resource_type": "Custom::Echo",
        "handler": f"{FX}:exact",
        "source": "module",
        "pattern": False,
        "served": True,
        "why": "named in the config file",
    }
    assert got["Custom::Acme*"]["pattern"] is True
    assert got["Custom::RandomSecret"]["served"] is True and got["Custom::RandomSecret"]["source"] == "built-in"
    assert got["Custom::Command"]["served"] is False and got["Custom::ElasticIpPool"]["served"] is False

    via_env = {
        r["resource_type"]: r
        for r in rows(
            invoke(
                "--json", env={"CFN_PROVIDER_CONFIG": str(config), "CFN_PROVIDER_HANDLER": f"Custom::Other={FX}:other"}
            )
        )
    }
    assert via_env["Custom::Other"]["handler"] == f"{FX}:other"
    assert via_env["Custom::Other"]["why"] == "named in CFN_PROVIDER_HANDLER"
    assert "Custom::Acme*" not in via_env  # like `run`: --handler (here from the environment) replaces the file's
    assert via_env["Custom::RandomSecret"]["served"] is False


def test_naming_a_type_nothing_provides_exits_2_listing_what_is_available():
    result = invoke("--handler", "Custom::Nope")
    assert result.exit_code == 2
    assert "no built-in or installed entry point is registered as Custom::Nope" in result.output
    assert "Custom::RandomSecret" in result.output


def test_a_configured_handler_that_does_not_load_exits_2_naming_it():
    result = invoke("--handler", "Custom::X=no_such_module_anywhere")
    assert result.exit_code == 2
    assert "handler 'no_such_module_anywhere' for Custom::X failed to load" in result.output  # no "(config)"
    assert "--handler-path" in result.output  # and how to fix it


def test_bad_option_values_are_usage_errors(tmp_path):
    assert invoke("--handler", "Custom::X=").exit_code == 2
    broken = tmp_path / "broken.toml"
    broken.write_text("= nope")
    result = invoke("--config", str(broken))
    assert result.exit_code == 2 and "not valid TOML" in result.output


def test_check_loads_entry_points_and_names_the_broken_plugin(monkeypatch):
    broken = importlib.metadata.EntryPoint("Custom::Broken", "no_such_plugin_module", ENTRY_POINT_GROUP)
    real = router_module.entry_points

    def with_broken(group: str):
        return [*real(group=group), broken] if group == ENTRY_POINT_GROUP else real(group=group)

    monkeypatch.setattr(router_module, "entry_points", with_broken)
    listed = invoke("--json")
    assert listed.exit_code == 0  # listing alone imports no entry point
    assert "Custom::Broken" in {r["resource_type"] for r in json.loads(listed.stdout) if not r["served"]}

    checked = invoke("--check", "--json")
    assert checked.exit_code == 1
    got = {r["resource_type"]: r for r in json.loads(checked.stdout)}
    assert got["Custom::Broken"]["status"].startswith("error: handler 'no_such_plugin_module' for Custom::Broken")
    assert all(got[t]["status"] == "ok" for t in BUILT_IN)

    table = invoke("--check")
    assert table.exit_code == 1 and "Custom::Broken: error: handler 'no_such_plugin_module'" in table.stderr


def test_check_passes_when_everything_loads():
    result = invoke("--check")
    assert result.exit_code == 0, result.output


def test_run_is_still_the_same_command():
    assert "handlers" in cli.main.commands and "run" in cli.main.commands
    assert cli.main.commands["run"].callback is cli.run.callback


def test_help_mentions_the_entry_point_group():
    result = invoke("--help")
    assert result.exit_code == 0 and "cfn_provider.handlers" in result.output
