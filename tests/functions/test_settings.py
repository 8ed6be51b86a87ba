"""cfn_provider.functions.settings: the `[functions."TYPE"]` table and `--function TYPE=SETTING=VALUE`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cfn_provider import cli
from cfn_provider.config import ConfigError, load_config_file
from cfn_provider.functions.settings import (
    FunctionSettingError,
    FunctionSettings,
    default_name,
    parse_options,
    unmatched,
)
from tests.support.cli import assert_not_started

CONFIG = """
[handlers]
"Custom::Thing" = "lambda:index.handler"

[functions."Custom::Thing"]
code = "/opt/cfn-functions/thing"
environment = { TABLE_NAME = "things", RETRIES = 3, DEBUG = false }
memory_mb = 256
timeout = 30
concurrency = 2
name = "thing"
log_group = "/cfn-provider/thing"
log_stream = "thing"
"""


def test_the_config_table_and_the_options_give_the_same_settings(tmp_path):
    (tmp_path / "c.toml").write_text(CONFIG)
    values = load_config_file(tmp_path / "c.toml")
    assert values["handler"] == ["Custom::Thing=lambda:index.handler"]
    settings = parse_options(values["function"])
    assert settings == {
        "Custom::Thing": FunctionSettings(
            code="/opt/cfn-functions/thing",
            environment={"TABLE_NAME": "things", "RETRIES": "3", "DEBUG": "false"},
            memory_mb=256,
            timeout=30,
            concurrency=2,
            name="thing",
            log_group="/cfn-provider/thing",
            log_stream="thing",
        )
    }
    assert parse_options(
        [
            "Custom::Thing=code=/opt/cfn-functions/thing",
            "Custom::Thing=env.TABLE_NAME=things",
            "Custom::Thing=environment.URL=https://x/?a=b",
        ]
    )["Custom::Thing"].environment == {"TABLE_NAME": "things", "URL": "https://x/?a=b"}


@pytest.mark.parametrize(
    "value, message",
    [
        ("Custom::Thing", "not TYPE=SETTING=VALUE"),
        ("Custom::Thing=code", "not TYPE=SETTING=VALUE"),
        ("Custom::Thing=colour=blue", "unknown setting 'colour'"),
        ("Custom::Thing=code=relative/path", "not an absolute path"),
        ("Custom::Thing=memory_mb=lots", "not a whole number"),
        ("Custom::Thing=memory_mb=8", "outside 16.."),
        ("Custom::Thing=concurrency=0", "outside 1..64"),
        ("Custom::Thing=timeout=901", "outside 1..900"),
        ("Custom::Thing=timeout=soon", "not a whole number"),
        ("Custom::Thing=env.1BAD=x", "not an environment variable name"),
        ("Custom::Thing=env.AWS_LAMBDA_FUNCTION_NAME=x", "reserved"),
        ("Custom::Thing=env._HANDLER=x", "reserved"),
        ("Custom::Thing=name=has space", "not a Lambda function name"),
        ("Custom::Thing=log_group=", "empty"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(value, message):
    with pytest.raises(FunctionSettingError, match=message):
        parse_options([value])


@pytest.mark.parametrize(
    "table, message",
    [
        ('[functions]\n"Custom::X" = "index.handler"\n', "must be a table"),
        ('[functions."Custom::X"]\nenvironment = "A=1"\n', "environment must be a table"),
        ('[functions."Custom::X"]\ncode = ["/a", "/b"]\n', "must be a single value"),
    ],
)
def test_a_bad_config_table_is_a_config_error(tmp_path, table, message):
    (tmp_path / "c.toml").write_text(table)
    with pytest.raises(ConfigError, match=message):
        load_config_file(tmp_path / "c.toml")


def test_names_come_from_the_resource_type():
    assert default_name("Custom::Thing") == "Custom-Thing"
    assert default_name("Custom::Acme*") == "Custom-Acme"
    assert default_name("AWS::CloudFormation::CustomResource") == "AWS-CloudFormation-CustomResource"


def test_settings_for_a_type_no_lambda_handler_serves_are_refused_at_start():
    assert unmatched({"Custom::Typo": FunctionSettings(), "Custom::A": FunctionSettings()}, ["Custom::A"]) == [
        "Custom::Typo"
    ]
    result = CliRunner().invoke(
        cli.main,
        [
            "run",
            "--queue-url",
            "https://sqs.example/q",
            "--handler",
            "Custom::A=lambda:index.handler",
            "--function",
            "Custom::Typo=code=/opt/fn",
        ],
    )
    assert_not_started(result, "--function", "function settings for Custom::Typo, which no lambda: handler serves")


def test_run_help_documents_the_function_option():
    result = CliRunner().invoke(cli.main, ["run", "--help"])
    assert "--function TYPE=SETTING=VALUE" in result.output
    for word in ("code=FOLDER", "env.NAME=VALUE", "memory_mb=N", "concurrency=N", "log_group=NAME"):
        assert word in result.output
