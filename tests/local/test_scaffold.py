"""cfn_provider.local.scaffold: `cfn-provider init NAME` writes a handler project whose own test
passes out of the box (run here as its author would, with this virtualenv), whose packaging
registers the resource as an entry point, and which `simulate` serves by that entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cfn_provider import cli
from tests.support.stack_emulators import stop_stack_emulators

CLI = Path(sys.executable).with_name("cfn-provider")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CFN_PROVIDER_", "PYTEST_"))}


def init(tmp_path: Path, *args: str):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return CliRunner().invoke(cli.main, ["init", *args], catch_exceptions=False)
    finally:
        os.chdir(cwd)


@pytest.mark.slow
def test_the_generated_project_passes_its_own_test_runs_under_simulate_and_registers_its_entry_point(tmp_path):
    made = init(tmp_path, "acme-things")
    assert made.exit_code == 0, made.output
    project = tmp_path / "acme-things"
    assert {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()} == {
        "pyproject.toml",
        "README.md",
        "template.yaml",
        "src/acme_things/__init__.py",
        "src/acme_things/thing.py",
        "tests/test_thing.py",
        ".gitignore",
    }
    assert ".cfn-simulate/" in (project / ".gitignore").read_text().splitlines()
    assert "Custom::AcmeThings" in (project / "src/acme_things/thing.py").read_text()

    # its own test, as its author runs it
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tested.returncode == 0 and "2 passed" in tested.stdout, tested.stdout + tested.stderr

    # its packaging: setuptools reads the entry point (group cfn_provider.handlers) from pyproject.toml;
    # with the metadata beside the package (as an install puts it), the bare type names it
    meta = subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "egg_info", "--egg-base", "src"],
        cwd=project,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert meta.returncode == 0, meta.stderr
    assert (project / "src/acme_things.egg-info/entry_points.txt").read_text().split() == [
        "[cfn_provider.handlers]",
        "Custom::AcmeThings",
        "=",
        "acme_things.thing:handler",
    ]
    listed = subprocess.run(
        [str(CLI), "handlers", "--handler-path", "src", "--handler", "Custom::AcmeThings"],
        cwd=project,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        listed.returncode == 0
        and ["Custom::AcmeThings", "acme_things.thing:handler", "entry", "point", "of", "acme-things"]
        == listed.stdout.splitlines()[1].split()[:6]
    ), listed.stdout

    # simulate on it, served by its entry point
    try:
        shown = []
        for args in (
            ["create", "template.yaml", "--handler", "Custom::AcmeThings", "--handler-path", "src"],
            ["update", "--parameter", "Size=7"],
            ["delete"],
        ):
            done = subprocess.run(
                [str(CLI), "simulate", *args], cwd=project, env=env(), capture_output=True, text=True, timeout=180
            )
            assert done.returncode == 0, done.stdout + done.stderr
            shown.append([line.split() for line in done.stdout.splitlines()])
        assert ["Size", "3"] in shown[0] and ["Size", "7"] in shown[1]
        assert ["Stack", "template:", "DELETE_COMPLETE"] in shown[2]
    finally:
        stop_stack_emulators(project)


def test_init_refuses_a_bad_name_a_bad_type_and_a_folder_in_use(tmp_path):
    assert init(tmp_path, "9lives").exit_code == 2
    assert init(tmp_path, "ok", "--type", "AWS::S3::Bucket").exit_code == 2
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    refused = init(tmp_path, "taken")
    assert refused.exit_code == 2 and "cfn-provider: " in refused.output and "already exists" in refused.output
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine" and len(list((tmp_path / "taken").iterdir())) == 1
    typed = init(tmp_path, "my_thing", "--type", "Custom::Widget")
    assert typed.exit_code == 0
    assert '"Custom::Widget" = "my_thing.thing:handler"' in (tmp_path / "my_thing" / "pyproject.toml").read_text()


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_generated_project_installs_and_passes_in_a_fresh_virtualenv_with_the_provider_it_came_from(tmp_path):
    """cfn-sns-provider is on no index: the project names the checkout this cfn-provider runs from,
    and `init`'s own "Next" line (a virtualenv of the project's, pip install -e '.[test]', pytest) passes."""
    made = subprocess.run(
        [str(CLI), "init", "acme-things"], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr
    assert f"It depends on cfn-sns-provider from the checkout cfn-provider runs from ({REPO.as_uri()})" in made.stdout
    project = tmp_path / "acme-things"
    pyproject = (project / "pyproject.toml").read_text()
    assert f'dependencies = ["cfn-sns-provider @ {REPO.as_uri()}"]' in pyproject
    assert 'dependencies = ["cfn-sns-provider>=' in pyproject  # the released form, beside it
    next_line = made.stdout.splitlines()[-1].strip()
    assert (
        next_line == "cd acme-things && python -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest"
    )
    steps = next_line.split(" && ")[1:]
    for step in steps:
        argv = step.split()
        if argv[0] == "python":
            argv[0] = sys.executable  # the test's interpreter (any Python 3.11+ does)
        if argv[0].endswith("/pip"):
            argv += ["--quiet", "--disable-pip-version-check", "-c", str(REPO / "constraints.txt")]
            argv = [a.strip("'") for a in argv]
        if argv[0].endswith("/pytest"):
            argv += ["-q", "-p", "no:cacheprovider"]
        done = subprocess.run(argv, cwd=project, env=env(), capture_output=True, text=True, timeout=600)
        try:
            assert done.returncode == 0, f"{step}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        finally:
            stop_stack_emulators(project)
    assert "2 passed" in done.stdout, done.stdout


def test_the_provider_a_project_depends_on_is_where_cfn_provider_came_from():
    from cfn_provider.local.provider_source import from_direct_url

    wheel = from_direct_url('{"url": "file:///r/dist/x.whl", "archive_info": {}}', "0.2.0")
    assert wheel.requirement("simulate") == "cfn-sns-provider[simulate] @ file:///r/dist/x.whl"
    assert "the file cfn-provider was installed from (file:///r/dist/x.whl)" in wheel.said
    checkout = from_direct_url('{"url": "file:///r", "dir_info": {"editable": true}}', "0.2.0")
    assert checkout.requirement() == "cfn-sns-provider @ file:///r" and "checkout" in checkout.said
    for unknown in (None, "not json", '{"url": "https://example.com/x.whl", "archive_info": {}}'):
        by_name = from_direct_url(unknown, "0.2.0")
        assert by_name.requirement() == "cfn-sns-provider==0.2.0" and "--find-links" in by_name.said
    assert checkout.released("simulate") == "cfn-sns-provider[simulate]>=0.2.0"


@pytest.mark.slow
def test_init_lambda_scaffolds_a_cfnresponse_function_whose_own_test_passes(tmp_path):
    made = init(tmp_path, "hello-fn", "--template", "lambda")
    assert made.exit_code == 0, made.output
    project = tmp_path / "hello-fn"
    assert {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()} == {
        "README.md",
        "template.yaml",
        "function/index.py",
        "tests/test_function.py",
        ".gitignore",
    }
    index = (project / "function/index.py").read_text()
    assert "import cfnresponse" in index and "def handler(event, context):" in index
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tested.returncode == 0 and "1 passed" in tested.stdout, tested.stdout + tested.stderr
