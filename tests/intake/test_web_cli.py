"""`cfn-provider run --transport web ...` and `cfn-provider web-token`: their options, and docs/ros.md's
"Try it locally" recipe, run as written (curl against a real daemon process, plain HTTP on loopback)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
from click.testing import CliRunner

import cfn_provider.cli as cli
from cfn_provider.ros_options import APPLIES_TO
from cfn_provider.trust.web_tokens import ASYNC, SYNC, Mode, new_token, strength
from cfn_provider.web_options import WEB_ONLY, WEB_OPTIONS
from tests.support.cli import assert_not_started
from tests.support.daemons import REPO
from tests.support.web import free_port


def test_web_options_reach_settings_without_a_queue_url(captured, token_file: Path, tmp_path: Path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    result = CliRunner().invoke(
        cli.main,
        [
            "run",
            "--transport",
            "web",
            "--web-address",
            "10.0.0.5",
            "--web-port",
            "9443",
            "--web-cert",
            str(cert),
            "--web-key",
            str(key),
            "--web-token-file",
            str(token_file),
            "--web-allow-source",
            "10.0.0.0/8",
            "--web-allow-source",
            "192.168.1.7",
            "--web-max-body",
            "65536",
            "--web-header-timeout",
            "3",
            "--web-body-timeout",
            "4",
            "--web-sync-timeout",
            "30",
        ],
    )
    assert result.exit_code == 0, result.output
    [s] = captured
    w = s.web
    assert (s.transport, s.queue_url, w.address, w.port, w.cert_file, w.key_file, w.token_file) == (
        "web",
        "",
        "10.0.0.5",
        9443,
        str(cert),
        str(key),
        str(token_file),
    )
    assert (w.allow_sources, w.max_body, w.header_timeout, w.body_timeout, w.sync_timeout, w.allow_http) == (
        ("10.0.0.0/8", "192.168.1.7/32"),
        65536,
        3.0,
        4.0,
        30.0,
        False,
    )


def test_the_tenants_table_of_the_config_file_reaches_settings(captured, token_file: Path, tmp_path: Path):
    config = tmp_path / "c.toml"
    config.write_text(
        'transport = "web"\nweb-allow-http = true\nhandler = ["Custom::Echo", "Custom::RandomSecret"]\n'
        f'web-token-file = "{token_file}"\n'
        '[tenants.team-a]\nhandlers = ["Custom::RandomSecret"]\n[tenants.team-b]\nhandlers = []\n'
    )
    result = CliRunner().invoke(cli.main, ["run", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert captured[0].tenant_handlers == ("team-a=Custom::RandomSecret", "team-b=-")  # team-b: given none
    config.write_text(config.read_text() + 'topics = ["acs:mns:cn-hangzhou:1:topics/t"]\n')
    result = CliRunner().invoke(cli.main, ["run", "--config", str(config)])  # topics are the queues'
    assert result.exit_code == 2 and "--tenant-topic applies to --transport sqs or mns only" in result.output
    config.write_text('transport = "web"\n[tenants."team a"]\nhandlers = []\n')
    result = CliRunner().invoke(cli.main, ["run", "--config", str(config)])
    assert result.exit_code == 2 and "tenant name" in result.output


def test_web_from_the_environment_with_a_token_there(captured, monkeypatch):
    monkeypatch.setenv("CFN_PROVIDER_TRANSPORT", "web")
    monkeypatch.setenv("CFN_PROVIDER_WEB_ALLOW_HTTP", "1")
    monkeypatch.setenv("CFN_PROVIDER_WEB_TOKEN", f"{new_token()},{new_token()}")
    result = CliRunner().invoke(cli.main, ["run"])
    assert result.exit_code == 0, result.output
    assert captured[0].web.allow_http and captured[0].web.port == 8443 and captured[0].web.max_body == 256 * 1024


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--transport", "web", "--web-token-file", "{tokens}"], {}, "needs --web-cert and --web-key"),
        (["--transport", "web", "--web-cert", "c.pem", "--web-token-file", "{tokens}"], {}, "go together"),
        (["--transport", "web", "--web-allow-http"], {}, "needs a path token"),
        (["--transport", "web", "--web-allow-http"], {"CFN_PROVIDER_WEB_TOKEN": "tooshort"}, "too weak"),
        (
            ["--transport", "web", "--web-allow-http", "--web-token-file", "{tokens}", "--web-allow-source", "10.1/33"],
            {},
            "is not an IP address or network",
        ),
        (
            ["--transport", "web", "--web-allow-http", "--web-token-file", "{tokens}", "--queue-url", "https://sqs/q"],
            {},
            "--queue-url applies to --transport sqs only, not web",
        ),
        (
            ["--transport", "web", "--web-allow-http", "--web-token-file", "{tokens}", "--mns-queue", "q"],
            {},
            "--mns-queue applies to --transport mns only",
        ),
        (
            ["--queue-url", "https://sqs/q", "--web-port", "1"],
            {},
            "--web-port applies to --transport web only, not sqs",
        ),
        (["--queue-url", "https://sqs/q"], {"CFN_PROVIDER_WEB_ALLOW_HTTP": "1"}, "--web-allow-http applies"),
    ],
)
def test_usage_errors(captured, monkeypatch, token_file: Path, args, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(cli.main, ["run", *[a.format(tokens=token_file) for a in args]])
    assert result.exit_code == 2 and message in " ".join(result.output.split()) and not captured, result.output
    assert token_file.read_text().strip() not in result.output


def test_help_documents_every_web_option():
    text = " ".join(CliRunner().invoke(cli.main, ["run", "--help"]).output.split())
    names = [name for option in WEB_OPTIONS for name in option(lambda: None).__click_params__[0].opts]
    assert len(names) == len(WEB_OPTIONS) == len(WEB_ONLY) == len([n for n, t in APPLIES_TO.items() if t == ("web",)])
    for name in names:
        assert name in text, name
    assert "sqs, mns or web" in text or "web (an HTTP(S) listener" in text
    docs = (REPO / "docs" / "ros.md").read_text()
    for name in names:
        assert f"`{name}" in docs, name


def test_web_token_new_rotate_and_print(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("CFN_PROVIDER_WEB_TOKEN", raising=False)
    path = tmp_path / "tok"
    run = CliRunner().invoke
    result = run(cli.main, ["web-token", "--new", "--web-token-file", str(path)])
    assert result.exit_code == 0, result.output
    first = path.read_text().split()
    assert len(first) == 1 and strength(first[0]) >= 256 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert run(cli.main, ["web-token", "--new", "--web-token-file", str(path)]).exit_code != 0  # never overwritten
    assert run(cli.main, ["web-token", "--rotate", "--web-token-file", str(path)]).exit_code == 0
    second = path.read_text().split()
    assert len(second) == 2 and second[1] == first[0] and second[0] != first[0]
    result = run(cli.main, ["web-token", "--web-token-file", str(path), "--url", "https://p.example.com:8443"])
    assert result.exit_code == 0
    assert f"web[idempotent]:https://p.example.com:8443/{second[0]}\n" in result.output
    assert f"web[sync,idempotent]:https://p.example.com:8443/{second[0]}/sync\n" in result.output
    result = run(
        cli.main,
        [
            "web-token",
            "--web-token-file",
            str(path),
            "--url",
            "https://p.example.com",
            "--mode",
            "sync",
            "--no-idempotent",
        ],
    )
    assert result.output == f"web[sync]:https://p.example.com/{second[0]}/sync\n"
    result = run(cli.main, ["web-token", "--web-token-file", str(path), "--url", "ftp://p.example.com"])
    assert result.exit_code == 2 and "https://HOST" in result.output


def test_web_token_new_name_writes_a_tenants_token_beside_the_others(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("CFN_PROVIDER_WEB_TOKEN", raising=False)
    path, run = tmp_path / "tok", CliRunner().invoke
    assert run(cli.main, ["web-token", "--new", "--web-token-file", str(path)]).exit_code == 0  # an old bare file
    (old,) = path.read_text().split()
    result = run(cli.main, ["web-token", "--new", "team-a", "--web-token-file", str(path)])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in path.read_text().splitlines()]
    assert lines[0] == [old] and lines[1][0] == "team-a" and strength(lines[1][1]) >= 256
    assert run(cli.main, ["web-token", "--new", "team-a", "--web-token-file", str(path)]).exit_code != 0
    assert run(cli.main, ["web-token", "--rotate", "--tenant", "team-a", "--web-token-file", str(path)]).exit_code == 0
    rotated = [line.split() for line in path.read_text().splitlines()]
    assert rotated[0] == [old] and rotated[2] == lines[1] and rotated[1][0] == "team-a" and rotated[1] != lines[1]
    result = run(
        cli.main,
        ["web-token", "--tenant", "team-a", "--web-token-file", str(path), "--url", "https://p", "--mode", "sync"],
    )
    assert result.output == f"web[sync,idempotent]:https://p/{rotated[1][1]}/sync\n"
    assert run(cli.main, ["web-token", "--new", "bad/name", "--web-token-file", str(path)]).exit_code == 2


def test_web_token_mode_offers_both_and_exactly_the_modes_a_path_asks_for():
    """web-token's --mode is `both` or a web_tokens.Mode (the Literal a request path's mode is typed as):
    the command line names the same values, so mypy's view of `mode` is what an operator can pass."""
    [param] = [p for p in cli.main.commands["web-token"].params if p.name == "mode"]
    assert tuple(param.type.choices) == ("both", *get_args(Mode)) == ("both", ASYNC, SYNC)


def test_a_token_file_that_cannot_be_used_is_a_start_up_error(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("CFN_PROVIDER_WEB_TOKEN", raising=False)
    empty = tmp_path / "tok"
    empty.write_text("# no token yet\n")
    empty.chmod(0o600)
    result = CliRunner().invoke(cli.main, ["web-token", "--web-token-file", str(empty), "--url", "https://p.example"])
    assert_not_started(result, f"{empty} holds no token")


def test_a_listener_that_cannot_listen_is_a_start_up_error(token_file: Path, tmp_path: Path, monkeypatch):
    """The transport cannot be set up (here: its port is taken): `run` exits 2, naming the address."""
    for name in list(os.environ):
        if name.startswith("CFN_PROVIDER_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr("cfn_provider.logs.configure", lambda *a, **k: None)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    with socket.socket() as taken, contextlib.ExitStack() as restore:
        for sig, handler in saved.items():  # the daemon's loop installs its own and leaves them
            restore.callback(signal.signal, sig, handler)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            cli.main,
            [*"run --transport web --web-allow-http --web-address 127.0.0.1 --web-port".split(), str(port)]
            + ["--web-token-file", str(token_file), "--state", f"sqlite://{tmp_path}/s.db"],
        )
    assert_not_started(result, f"cannot listen on 127.0.0.1:{port}")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_try_it_locally_recipe_runs_as_written(tmp_path: Path):
    docs = (REPO / "docs" / "ros.md").read_text()
    recipe = re.search(r"<!-- try-it-locally -->\n```sh\n(.*?)```", docs, re.S)
    assert recipe, "docs/ros.md lost its try-it-locally recipe"
    script = recipe.group(1).replace("8080", str(free_port()))  # a free port: tests never use fixed ones
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
    }
    env = {k: v for k, v in env.items() if not k.startswith("CFN_PROVIDER_")}
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=90)
    finally:  # the script's daemon too, should the script stop before its `kill`
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err + (tmp_path / "daemon.log").read_text()[-2000:]
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer["Status"] == "SUCCESS" and answer["Data"] == {"Message": "hello"} and answer["RequestId"] == "req-1"
    token = (tmp_path / "web-token").read_text().strip()
    assert token not in (tmp_path / "daemon.log").read_text()


def test_the_command_suggested_for_a_missing_token_works(captured, tmp_path: Path):
    """Starting without a token names the command that makes one: it runs as printed (before, it named
    `web-token --new --token-file FILE`, an option that does not exist), and `run` then starts."""
    result = CliRunner().invoke(cli.main, ["run", "--transport", "web", "--web-allow-http"])
    assert result.exit_code == 2 and not captured, result.output
    suggested = re.search(r"`cfn-provider (web-token [^`]*)`", " ".join(result.output.split()))
    assert suggested, result.output
    path = tmp_path / "web-token"
    args = [str(path) if word == "FILE" else word for word in suggested.group(1).split()]
    made = CliRunner().invoke(cli.main, args)
    assert made.exit_code == 0 and len(path.read_text().strip()) >= 22, made.output
    started = CliRunner().invoke(
        cli.main, ["run", "--transport", "web", "--web-allow-http", "--web-token-file", str(path)]
    )
    assert started.exit_code == 0 and captured, started.output
    help_text = " ".join(CliRunner().invoke(cli.main, ["run", "--help"]).output.split())
    assert "`cfn-provider web-token --new --web-token-file FILE`" in help_text  # --web-token-file's help says the same
