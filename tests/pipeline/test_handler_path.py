"""cfn_provider.pipeline.handler_path: the one import rule for handler modules (`run`, `handlers`,
`simulate`): installed packages, PYTHONPATH and the --handler-path folders, never the working
directory by accident; handler folders after everything else, and a name they share with an
installed module refused."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from cfn_provider import cli
from cfn_provider.pipeline import handler_path
from cfn_provider.pipeline.router import HandlerError, Router

REPO = Path(__file__).resolve().parents[2]
MODULE = "def create(event):\n    return 'made-here'\n\ndef update(event):\n    pass\n\ndef delete(event):\n    pass\n"


@pytest.fixture(autouse=True)
def _own_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's handler folders leave sys.path as it was."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def handler_module(folder: Path) -> str:
    name = f"thing_{uuid.uuid4().hex[:8]}"  # a fresh name: nothing cached in sys.modules
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(MODULE)
    return name


def test_a_module_in_the_working_directory_is_not_imported_and_the_error_says_how_to_fix_it(tmp_path, monkeypatch):
    name = handler_module(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(HandlerError) as info:
        Router([("Custom::Thing", name)], use_entry_points=False)
    text = str(info.value)
    assert f"handler '{name}' for Custom::Thing failed to load: no module named '{name}'" in text
    assert "(config)" not in text  # it came from the command line: no misleading origin
    assert f"{name} is in the current folder {tmp_path}" in text and f"add --handler-path {tmp_path}" in text


def test_a_handler_path_folder_is_searched_after_everything_else(tmp_path):
    name = handler_module(tmp_path / "handlers")
    router = Router([("Custom::Thing", name)], use_entry_points=False, handler_paths=[str(tmp_path / "handlers")])
    assert router.route("Custom::Thing").handler().create({}) == "made-here"
    assert sys.path[-1] == str((tmp_path / "handlers").resolve())  # appended: shadows nothing


def test_a_handler_folder_module_named_like_an_installed_one_is_refused_by_name(tmp_path):
    (tmp_path / "json.py").write_text(MODULE)  # the standard library's json, already imported
    (tmp_path / "click.py").write_text(MODULE)  # an installed package
    for shadow in ("json", "click"):
        with pytest.raises(
            HandlerError,
            match=f"module '{shadow}' is in the handler folder {tmp_path} and also "
            "elsewhere on the path .*rename yours",
        ):
            Router([("Custom::Thing", shadow)], use_entry_points=False, handler_paths=[str(tmp_path)])


def test_a_missing_handler_folder_is_an_error(tmp_path):
    with pytest.raises(HandlerError, match="--handler-path .*nowhere: no such folder"):
        Router([], use_entry_points=False, handler_paths=[str(tmp_path / "nowhere")])


def test_a_module_that_imports_something_missing_says_what_is_missing(tmp_path):
    (tmp_path / "needy_thing.py").write_text("import no_such_dependency_here\n")
    with pytest.raises(HandlerError, match="No module named 'no_such_dependency_here'"):
        Router([("Custom::Thing", "needy_thing")], use_entry_points=False, handler_paths=[str(tmp_path)])


def test_run_and_handlers_take_handler_path_from_the_command_line_environment_and_config(tmp_path, monkeypatch):
    name = handler_module(tmp_path / "mine")
    monkeypatch.chdir(tmp_path)
    listed = CliRunner().invoke(
        cli.main, ["handlers", "--handler", f"Custom::Thing={name}", "--json", "--handler-path", "mine"]
    )
    assert listed.exit_code == 0 and '"source": "module"' in listed.output, listed.output
    other = handler_module(tmp_path / "elsewhere")
    env = CliRunner().invoke(
        cli.main,
        ["handlers", "--handler", f"Custom::Thing={other}"],
        env={"CFN_PROVIDER_HANDLER_PATH": f"{tmp_path / 'nothing-here'}{os.pathsep}elsewhere"},
    )
    assert env.exit_code == 2 and "nothing-here: no such folder" in env.output  # PATH-style list, each checked
    third = handler_module(tmp_path / "conf" / "handlers")
    (tmp_path / "conf" / "provider.toml").write_text(
        f'handler-path = "handlers"\n[handlers]\n"Custom::Thing" = "{third}"\n'
    )
    monkeypatch.chdir(tmp_path / "mine")  # relative to the config file, not to where the command runs
    configured = CliRunner().invoke(cli.main, ["handlers", "--config", str(tmp_path / "conf" / "provider.toml")])
    assert configured.exit_code == 0 and third in configured.output, configured.output


def test_python_dash_m_does_not_import_from_the_working_directory_either(tmp_path):
    name = handler_module(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "cfn_provider", "handlers", "--handler", f"Custom::Thing={name}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and f"add --handler-path {tmp_path}" in done.stderr, done.stderr
    named = subprocess.run(
        [sys.executable, "-m", "cfn_provider", "handlers", "--handler", f"Custom::Thing={name}", "--handler-path", "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert named.returncode == 0 and name in named.stdout, named.stderr


def test_not_found_without_a_local_module_points_at_install_or_handler_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = handler_path.not_found("nowhere_module", ())
    assert "(none given)" in text and "install its package, or name its folder with --handler-path DIR" in text
