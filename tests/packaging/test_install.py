"""The distribution as a user installs it: `make dist`, then the wheel in a fresh virtualenv.

`make dist` (tools/dist.py) builds the sdist and the wheel, checks them with twine, writes the
wheelhouse (the wheel and its pinned runtime dependencies, every one with its sha256), installs
the wheel from it into a fresh virtualenv outside the repository and runs `cfn-provider demo`
there. That virtualenv is the one these tests use: one import name (`cfn_provider`) and nothing
else at the top of site-packages, so the product installs beside `python-daemon` (whose import
name is `daemon`) and beside a user's own `handlers` package. deploy/provider.yaml's install
step is run here too, against that wheelhouse: pinned, hash-checked, and refusing a tampered wheel.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.support.release import make_dist
from tests.support.stack_emulators import stop_stack_emulators

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(*args: str | Path, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; in the installed virtualenv, its Python runs isolated (`-I`) from a neutral
    folder, so neither this checkout's folders nor PYTHONPATH can stand in for what was installed."""
    kwargs.setdefault("cwd", Path(str(args[0])).parent)
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kwargs
    )


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """`make dist` into a temporary folder, keeping its smoke test's virtualenv: (dist, venv, the run)."""
    root = tmp_path_factory.mktemp("release")
    venv = root / "venv"
    dist, run = make_dist(root, "--smoke-venv", venv)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return dist, venv, run


@pytest.fixture(scope="module")
def venv(release: tuple[Path, Path, subprocess.CompletedProcess]) -> Path:
    """The fresh virtualenv `make dist` installed the wheel into (from the wheelhouse, hash-checked, plus
    the [demo] extra), with `python-daemon` added."""
    _, env, _ = release
    pip = _run(
        env / "bin" / "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "-c",
        REPO / "constraints.txt",
        "python-daemon==3.1.2",
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    return env


def _version() -> str:
    import cfn_provider

    return cfn_provider.__version__


def test_make_dist_builds_checks_and_runs_the_demo_from_the_wheel(release):
    dist, venv, run = release
    version = _version()
    assert sorted(p.name for p in dist.iterdir() if p.is_file()) == [
        f"cfn_sns_provider-{version}-py3-none-any.whl",
        f"cfn_sns_provider-{version}.tar.gz",
    ]
    assert run.stdout.count("PASSED") == 2, run.stdout  # twine check --strict, wheel and sdist
    assert "Every request got the answer expected." in run.stdout  # cfn-provider demo from the fresh venv
    assert not str(venv).startswith(str(REPO))


def test_one_source_for_the_version(release):
    """setup.cfg reads cfn_provider.__version__; the wheel, the sdist and `--version` all say it."""
    dist, venv, _ = release
    version = _version()
    assert "version = attr: cfn_provider.__version__" in (REPO / "setup.cfg").read_text()
    assert not re.search(r"^version\s*=\s*\d", (REPO / "setup.cfg").read_text(), re.M)
    with zipfile.ZipFile(dist / f"cfn_sns_provider-{version}-py3-none-any.whl") as wheel:
        metadata = wheel.read(f"cfn_sns_provider-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in metadata
    shown = _run(venv / "bin" / "cfn-provider", "--version")
    assert shown.returncode == 0 and version in shown.stdout, shown.stdout


def test_the_wheel_and_the_sdist_carry_the_licence_and_the_sdist_no_tests_it_cannot_run(release):
    """Apache-2.0's text in both archives (setup.cfg license_files); no tests in the sdist (MANIFEST.in):
    they need the repository's conftest, support modules and docs. `make dist` checks it as a step."""
    dist, _, run = release
    version = _version()
    licence = (REPO / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    with zipfile.ZipFile(dist / f"cfn_sns_provider-{version}-py3-none-any.whl") as wheel:
        assert wheel.read(f"cfn_sns_provider-{version}.dist-info/licenses/LICENSE").decode() == licence
        assert "License-File: LICENSE" in wheel.read(f"cfn_sns_provider-{version}.dist-info/METADATA").decode()
    with tarfile.open(dist / f"cfn_sns_provider-{version}.tar.gz") as sdist:
        names = sdist.getnames()
        member = sdist.extractfile(f"cfn_sns_provider-{version}/LICENSE")
        assert member is not None and member.read().decode() == licence
    assert not [name for name in names if "/tests/" in name or name.endswith("/tests")], names
    assert "make dist: the licence in the wheel and the sdist, and no tests in the sdist" in run.stdout


def test_the_wheelhouse_pins_and_hashes_every_wheel(release):
    dist, _, run = release
    wheelhouse = dist / "wheelhouse"
    # the release the stack pins (deploy/provider.yaml's ReleaseSha256), and the target it was built for
    release_sha256 = hashlib.sha256((wheelhouse / "requirements.txt").read_bytes()).hexdigest()
    assert f"ReleaseSha256={release_sha256}" in run.stdout, run.stdout[-2000:]
    assert (wheelhouse / "TARGET").read_text().startswith("CPython 3.11 on manylinux_2_34_x86_64 ")
    lines = {
        line.split("==")[0]: line
        for line in (wheelhouse / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    wheels = sorted(wheelhouse.glob("*.whl"))
    assert len(lines) == len(wheels) > 10
    for wheel in wheels:
        name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert f"--hash=sha256:{digest}" in lines[name], (wheel.name, lines[name])
    assert lines["cfn-sns-provider"].startswith(f"cfn-sns-provider=={_version()} --hash=sha256:")
    for test_only in ("pytest", "moto", "hypothesis", "cfn-lint", "mypy"):
        assert test_only not in lines, test_only


def test_the_templates_package_spec_example_names_the_wheel_make_dist_makes(release):
    from tests.deploy.test_templates import PROVIDER, load

    dist, _, _ = release
    description = load(PROVIDER)["Parameters"]["PackageSpec"]["Description"]
    pins = dict(re.findall(r"\b(cfn-sns-provider)==([0-9][^ \"]*)", description))
    assert pins == {"cfn-sns-provider": _version()}, description
    wheel = f"cfn_sns_provider-{_version()}-py3-none-any.whl"
    assert wheel in description and (dist / "wheelhouse" / wheel).is_file()


# ------------------------------------------------------------------ deploy/provider.yaml's install step
def _user_data_install(
    release, tmp_path: Path, package_spec: str, wheelhouse: Path | None = None
) -> subprocess.CompletedProcess:
    """The template's user data, its first lines, `signal` and `install` parts, rendered as
    CloudFormation would and run under bash: /opt/cfn-provider is a folder of the test's, `aws s3
    cp` a stub copying from a local "bucket" (the wheelhouse as `aws s3 sync` would upload it; `aws
    autoscaling` answers the group's name), cfn-signal a stub recording its arguments in
    tmp_path/signals. ReleaseSha256 is the sha256 of the bucket's requirements.txt."""
    from tests.deploy.test_templates import PROVIDER, load, rendered, sections

    dist, _, _ = release
    bucket = wheelhouse or dist / "wheelhouse"
    stubs, opt = tmp_path / "bin", tmp_path / "opt"
    stubs.mkdir()
    (stubs / "aws").write_text(f"""#!/bin/bash
set -eu
[ "$1" != autoscaling ] || {{ echo the-group; exit 0; }}
[ "$1 $2" = "s3 cp" ] || {{ echo "unexpected: aws $*" >&2; exit 2; }}
args=("$@"); src=${{args[-2]}}; dest=${{args[-1]}}; key=${{src#s3://the-bucket/releases/}}
if [[ " $* " == *" --recursive "* ]]; then mkdir -p "$dest"; cp -r {bucket}/. "$dest"
else cp "{bucket}/$key" "$dest"; fi
""")
    (stubs / "cfn-signal").write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> {tmp_path / "signals"}\n')
    (stubs / "ec2-metadata").write_text("#!/bin/sh\necho 'instance-id: i-0123'\n")
    (stubs / "python3.11").symlink_to(Path(sys.base_prefix) / "bin" / "python3.11")
    for stub in ("aws", "cfn-signal", "ec2-metadata"):
        (stubs / stub).chmod(0o755)
    parts = sections(
        rendered(
            load(PROVIDER),
            PackageSpec=package_spec,
            WheelhouseBucket="the-bucket",
            WheelhousePrefix="releases/",
            PackageIndexUrl="",
            ReleaseSha256=hashlib.sha256((bucket / "requirements.txt").read_bytes()).hexdigest(),
        )
    )
    script = (parts[""] + parts["signal"] + parts["install"]).replace("/opt/cfn-provider", str(opt / "cfn-provider"))
    script += "\ntrap - ERR EXIT  # the rest of the user data would go on from here\n"
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
    )


def test_the_templates_install_step_installs_the_pinned_hashed_wheelhouse(release, tmp_path: Path):
    result = _user_data_install(release, tmp_path, f"cfn-sns-provider=={_version()}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not (tmp_path / "signals").exists()  # nothing failed (success is signalled at the very end)
    assert _version() in result.stdout  # `cfn-provider --version` from what was installed
    installed = tmp_path / "opt" / "cfn-provider" / "bin" / "cfn-provider"
    assert installed.is_file()


def test_the_templates_install_step_refuses_a_pin_the_wheelhouse_lacks(release, tmp_path: Path):
    result = _user_data_install(release, tmp_path, "cfn-sns-provider==9.9.9")
    assert result.returncode == 1
    assert "PackageSpec cfn-sns-provider==9.9.9 is not in the wheelhouse's requirements.txt" in result.stderr
    assert (tmp_path / "signals").read_text().startswith("--exit-code|1|")
    assert not (tmp_path / "opt" / "cfn-provider" / "bin" / "cfn-provider").exists()


def test_the_templates_install_step_refuses_a_tampered_wheel(release, tmp_path: Path):
    dist, _, _ = release
    tampered = tmp_path / "tampered"
    shutil.copytree(dist / "wheelhouse", tampered)
    [wheel] = tampered.glob("structlog-*.whl")
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # still a zip file; no longer the hashed one
    result = _user_data_install(release, tmp_path, f"cfn-sns-provider=={_version()}", wheelhouse=tampered)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "DO NOT MATCH THE HASHES" in result.stderr, result.stderr[-3000:]
    assert (tmp_path / "signals").read_text().startswith("--exit-code|1|")


def _site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    return site


def test_the_distribution_installs_one_import_name(venv: Path):
    files = _run(
        venv / "bin" / "python",
        "-I",
        "-c",
        textwrap.dedent("""
        import json
        from importlib.metadata import distribution
        print(json.dumps(sorted({str(f).split("/")[0] for f in distribution("cfn-sns-provider").files})))
    """),
    )
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
    both = _run(
        python,
        "-I",
        "-c",
        "import daemon, cfn_provider; from cfn_provider import Resource, Call; "
        "print(daemon.DaemonContext.__module__, cfn_provider.__name__)",
    )
    assert both.returncode == 0, both.stderr
    assert both.stdout.split() == ["daemon.daemon", "cfn_provider"]
    demo = _run(venv / "bin" / "cfn-provider", "demo", timeout=300, cwd=venv)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]


def test_a_users_own_handlers_package_is_served_beside_the_built_ins(venv: Path, tmp_path: Path):
    """A Lambda project's `handlers/` folder on PYTHONPATH neither shadows nor is shadowed."""
    (tmp_path / "handlers").mkdir()
    (tmp_path / "handlers" / "__init__.py").write_text("")
    (tmp_path / "handlers" / "thing.py").write_text(
        textwrap.dedent("""
        def create(event, context):
            return {"PhysicalResourceId": "thing-1", "Data": {"Mine": "yes"}}
        def update(event, context):
            return None
        def delete(event, context):
            return None
    """)
    )
    (tmp_path / "template.yaml").write_text(
        textwrap.dedent("""
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
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    cli = venv / "bin" / "cfn-provider"
    try:
        created = _run(
            cli,
            "simulate",
            "create",
            "template.yaml",
            "--handler",
            "Custom::Thing=handlers.thing",
            "--handler",
            "Custom::Echo=cfn_provider.handlers.echo",
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
        assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-3000:]
        outputs = dict(
            line.split() for line in created.stdout.split("Outputs:", 1)[1].splitlines() if line.startswith("  ")
        )
        assert outputs == {"Mine": "yes", "Echo": "echoed"}
        # the stack's emulator is kept for its next operation until the stack is deleted: delete it
        deleted = _run(cli, "simulate", "delete", cwd=tmp_path, env=env, timeout=300)
        assert deleted.returncode == 0, deleted.stdout[-3000:] + deleted.stderr[-3000:]
    finally:
        stop_stack_emulators(tmp_path)  # a failure above leaves it running otherwise


HANDLER = """\
from __future__ import annotations

from typing import Any

from cfn_provider import Call, CustomResourceRequest, HandlerResult, Resource


class Thing(Resource):
    async def create(self, props: dict[str, Any], call: Call) -> HandlerResult:
        return {"PhysicalResourceId": f"thing-{props['Size']}", "Data": {"Region": call.region or ""}}


def update(event: CustomResourceRequest) -> HandlerResult | None:
    size = event["ResourceProperties"]["Size"]
    return {"Data": {"Size": size, "Old": event.get("OldResourceProperties", {}).get("Size")}}
"""


def test_the_wheel_ships_its_types_to_a_handler_authors_mypy(venv: Path, tmp_path: Path):
    """py.typed is installed, so mypy reads the SDK's annotations (without it, `--strict` reports
    cfn_provider as an untyped import); this repository's mypy checks against the installed wheel."""
    assert (_site_packages(venv) / "cfn_provider" / "py.typed").is_file()
    (tmp_path / "mypy.ini").write_text("[mypy]\n")

    def mypy(source: str) -> subprocess.CompletedProcess:
        (tmp_path / "handler.py").write_text(source)
        return _run(
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            "mypy.ini",
            "--verbose",
            "--cache-dir",
            tmp_path / "cache",
            "--python-executable",
            venv / "bin" / "python",
            "handler.py",
            cwd=tmp_path,
        )

    checked = mypy(HANDLER)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
    found = [line for line in checked.stderr.splitlines() if "cfn_provider/__init__.py" in line]
    assert found and all(str(_site_packages(venv)) in line for line in found), found  # the wheel, not this checkout
    wrong = mypy(HANDLER.replace('event["ResourceProperties"]', 'event["ResourceProps"]'))
    assert wrong.returncode == 1 and 'has no key "ResourceProps"' in wrong.stdout, wrong.stdout
