"""The distribution as a user installs it: `pip install .` into a fresh virtualenv.

One import name (`cfn_provider`) and nothing else at the top of site-packages, so the product
installs beside `python-daemon` (whose import name is `daemon`) and beside a user's own
`handlers` package. The virtualenv is built once for the module from a wheel of this checkout,
with the pinned dependencies (pip's cache makes that quick after the first time).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(*args: str | Path, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; in the installed virtualenv, its Python runs isolated (`-I`) from a neutral
    folder, so neither this checkout's folders nor PYTHONPATH can stand in for what was installed."""
    kwargs.setdefault("cwd", Path(str(args[0])).parent)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kwargs)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel of this checkout, `python-daemon` and moto (for `demo`)."""
    root = tmp_path_factory.mktemp("install")
    source, wheels = root / "source", root / "wheels"  # built from a copy: the checkout gets no build/
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", ".cfn-simulate"))
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, source)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("cfn_sns_provider-*.whl")
    env = root / "venv"
    assert _run(sys.executable, "-m", "venv", env).returncode == 0
    # --no-compile: the files installed are the same; skipping the byte-compilation of every
    # dependency (moto alone has thousands of modules) takes most of the CPU out of this step
    pip = _run(env / "bin" / "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
               "-c", REPO / "constraints.txt", f"{wheel}[demo]", "python-daemon==3.1.2")
    assert pip.returncode == 0, pip.stderr[-3000:]
    return env


def _site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    return site


def test_the_distribution_installs_one_import_name(venv: Path):
    files = _run(venv / "bin" / "python", "-I", "-c", textwrap.dedent("""
        import json
        from importlib.metadata import distribution
        print(json.dumps(sorted({str(f).split("/")[0] for f in distribution("cfn-sns-provider").files})))
    """))
    assert files.returncode == 0, files.stderr
    tops = {name for name in json.loads(files.stdout) if not name.endswith(".dist-info") and name != ".."}
    assert tops == {"cfn_provider"}
    site = _site_packages(venv)
    assert (site / "cfn_provider" / "handlers" / "echo.py").is_file()


def test_every_module_of_the_checkout_is_installed_without_a_package_list(venv: Path):
    """setup.cfg names no packages: setuptools finds them in the folders package_dir maps, so a new
    subpackage ships without an edit there."""
    site = _site_packages(venv) / "cfn_provider"
    source = {p.relative_to(REPO / "daemon") for p in (REPO / "daemon").rglob("*.py")}
    source |= {"handlers" / p.relative_to(REPO / "handlers") for p in (REPO / "handlers").rglob("*.py")}
    assert {p.relative_to(site) for p in site.rglob("*.py")} == source


def test_python_daemon_and_the_provider_side_by_side(venv: Path):
    python = venv / "bin" / "python"
    both = _run(python, "-I", "-c", "import daemon, cfn_provider; from cfn_provider import Resource, Call; "
                              "print(daemon.DaemonContext.__module__, cfn_provider.__name__)")
    assert both.returncode == 0, both.stderr
    assert both.stdout.split() == ["daemon.daemon", "cfn_provider"]
    demo = _run(venv / "bin" / "cfn-provider", "demo", timeout=300, cwd=venv)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]


def test_a_users_own_handlers_package_is_served_beside_the_built_ins(venv: Path, tmp_path: Path):
    """A Lambda project's `handlers/` folder on PYTHONPATH neither shadows nor is shadowed."""
    (tmp_path / "handlers").mkdir()
    (tmp_path / "handlers" / "__init__.py").write_text("")
    (tmp_path / "handlers" / "thing.py").write_text(textwrap.dedent("""
        def create(event, context):
            return {"PhysicalResourceId": "thing-1", "Data": {"Mine": "yes"}}
        def update(event, context):
            return None
        def delete(event, context):
            return None
    """))
    (tmp_path / "template.yaml").write_text(textwrap.dedent("""
        Resources:
          Thing:
            Type: Custom::Thing
            Properties: {ServiceToken: arn:aws:sns:us-east-1:123456789012:t}
          Echo:
            Type: Custom::Echo
            Properties: {ServiceToken: arn:aws:sns:us-east-1:123456789012:t, Name: echoed}
        Outputs:
          Mine: {Value: !GetAtt Thing.Mine}
          Echo: {Value: !Ref Echo}
    """))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    cli = venv / "bin" / "cfn-provider"
    created = _run(cli, "simulate", "create", "template.yaml", "--handler", "Custom::Thing=handlers.thing",
                   "--handler", "Custom::Echo=cfn_provider.handlers.echo", cwd=tmp_path, env=env, timeout=300)
    assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
    outputs = dict(line.split() for line in created.stdout.split("Outputs:", 1)[1].splitlines()
                   if line.startswith("  "))
    assert outputs == {"Mine": "yes", "Echo": "echoed"}


HANDLER = '''\
from __future__ import annotations

from typing import Any

from cfn_provider import Call, CustomResourceRequest, HandlerResult, Resource


class Thing(Resource):
    async def create(self, props: dict[str, Any], call: Call) -> HandlerResult:
        return {"PhysicalResourceId": f"thing-{props['Size']}", "Data": {"Region": call.region or ""}}


def update(event: CustomResourceRequest) -> HandlerResult | None:
    size = event["ResourceProperties"]["Size"]
    return {"Data": {"Size": size, "Old": event.get("OldResourceProperties", {}).get("Size")}}
'''


def test_the_wheel_ships_its_types_to_a_handler_authors_mypy(venv: Path, tmp_path: Path):
    """py.typed is installed, so mypy reads the SDK's annotations (without it, `--strict` reports
    cfn_provider as an untyped import); this repository's mypy checks against the installed wheel."""
    assert (_site_packages(venv) / "cfn_provider" / "py.typed").is_file()
    (tmp_path / "mypy.ini").write_text("[mypy]\n")

    def mypy(source: str) -> subprocess.CompletedProcess:
        (tmp_path / "handler.py").write_text(source)
        return _run(sys.executable, "-m", "mypy", "--strict", "--config-file", "mypy.ini", "--verbose",
                    "--cache-dir", tmp_path / "cache", "--python-executable", venv / "bin" / "python",
                    "handler.py", cwd=tmp_path)

    checked = mypy(HANDLER)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
    found = [line for line in checked.stderr.splitlines() if "cfn_provider/__init__.py" in line]
    assert found and all(str(_site_packages(venv)) in line for line in found), found  # the wheel, not this checkout
    wrong = mypy(HANDLER.replace('event["ResourceProperties"]', 'event["ResourceProps"]'))
    assert wrong.returncode == 1 and 'has no key "ResourceProps"' in wrong.stdout, wrong.stdout
