"""`cfn-provider init NAME`: a handler project to start from, whose own test passes out of the box.

    NAME/
      pyproject.toml            the package, with its entry point in the group cfn_provider.handlers
      README.md                 how to test, try and serve it
      template.yaml             a stack using the resource
      src/PACKAGE/__init__.py
      src/PACKAGE/thing.py      one SDK resource (cfn_provider.Resource): a thing kept in SSM Parameter Store
      tests/test_thing.py       create -> update -> delete through the real path, as `simulate` drives it
      .gitignore                simulate's stacks (.cfn-simulate/) and build leftovers

NAME is the distribution's name (letters, digits, `-`, `_`); PACKAGE is NAME in snake case, and
the ResourceType is `Custom::` and NAME in CamelCase unless `--type` says otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from ..errors import StartupError
from . import provider_source


class ScaffoldError(StartupError):
    """`init` wrote nothing (its folder is in use): `cfn-provider: <why>`, exit 2."""


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
_TYPE = re.compile(r"Custom::[A-Za-z0-9_@-]{1,60}")

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
description = "{rtype}: a CloudFormation custom resource served by cfn-provider"
requires-python = ">=3.11"
# {source_said}
# once it is on a package index: dependencies = ["{released}"], test = ["{released_test}", "pytest"]
dependencies = ["{dependency}"]

[project.optional-dependencies]
test = ["{test_dependency}", "pytest"]

# `cfn-provider run --handler {rtype}` serves it once this package is installed (named, never by default)
[project.entry-points."cfn_provider.handlers"]
"{rtype}" = "{package}.thing:handler"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

THING = '''\
"""{rtype}: a thing kept as an SSM parameter (replace the body with what your resource does).

Properties: Size (an integer, 1..100). Attribute: Size. The parameter's Description is this
provider's marker (stack and logical id): Update and Delete act only on a parameter carrying it,
because a PhysicalResourceId is whatever the template's author writes (docs/handlers.md, "Holding
the trust line").
"""
from __future__ import annotations

import uuid
from typing import Any

from cfn_provider import Call, Resource

PREFIX = "/{name}/"


class Thing(Resource):
    schema = {{
        "type": "object", "required": ["Size"], "additionalProperties": False,
        "properties": {{"Size": {{"type": "integer", "minimum": 1, "maximum": 100}}}},
    }}

    async def create(self, props: dict[str, Any], call: Call) -> Any:  # props validated: Size is an int
        name = PREFIX + uuid.uuid4().hex[:12]
        async with call.client("ssm") as ssm:
            await ssm.put_parameter(Name=name, Type="String", Value=str(props["Size"]), Description=_marker(call))
        return {{"PhysicalResourceId": name, "Data": {{"Size": props["Size"]}}}}

    async def update(self, props: dict[str, Any], old: dict[str, Any], call: Call) -> Any:
        async with call.client("ssm") as ssm:
            if not await _mine(ssm, call):
                raise RuntimeError("the parameter is not one this stack's resource made")
            await ssm.put_parameter(Name=call.physical_id, Type="String", Value=str(props["Size"]),
                                    Description=_marker(call), Overwrite=True)
        return {{"Data": {{"Size": props["Size"]}}}}

    async def delete(self, props: dict[str, Any], call: Call) -> None:  # never validated
        async with call.client("ssm") as ssm:
            if await _mine(ssm, call):  # anything else (gone, never made, not ours) is left alone
                await ssm.delete_parameter(Name=call.physical_id)


def _marker(call: Call) -> str:
    return f"{{call.stack_id}} {{call.logical_id}}"


async def _mine(ssm: Any, call: Call) -> bool:
    if not (call.physical_id or "").startswith(PREFIX):
        return False
    found = await ssm.describe_parameters(ParameterFilters=[{{"Key": "Name", "Values": [call.physical_id]}}])
    return any(p.get("Description") == _marker(call) for p in found["Parameters"])


handler = Thing.handler()
'''

TEMPLATE = """\
Parameters:
  Size: {{Type: Number, Default: 3}}
Resources:
  Thing:
    Type: {rtype}
    Properties:
      ServiceToken: arn:aws:sns:us-east-1:123456789012:cfn-provider   # your provider's topic; simulate uses its own
      Size: !Ref Size
Outputs:
  Size: {{Value: !GetAtt Thing.Size}}
"""

TEST = '''\
"""{rtype} through the real path (SNS, SQS, the daemon, a presigned S3 URL, on the stack's own
embedded AWS emulator), driven the way `cfn-provider simulate` drives it: create, update, delete."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
HANDLER = ["--handler", "{rtype}={package}.thing:handler"]
if importlib.util.find_spec("{package}") is None:  # not installed: from the source folder
    HANDLER += ["--handler-path", str(PROJECT / "src")]


def simulate(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}}  # the emulator's, not yours
    done = subprocess.run([sys.executable, "-m", "cfn_provider", "simulate", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    print(done.stdout, done.stderr)  # shown when a test fails
    return done


def outputs(folder: Path) -> dict[str, str]:
    state = json.loads((folder / ".cfn-simulate" / "thing.json").read_text())
    return {{name: entry["Value"] for name, entry in state["Outputs"].items()}}


def test_create_update_delete(tmp_path: Path) -> None:
    template = str(PROJECT / "template.yaml")
    assert simulate(tmp_path, "create", template, "--stack-name", "thing", *HANDLER).returncode == 0
    assert outputs(tmp_path) == {{"Size": "3"}}
    assert simulate(tmp_path, "update", "--parameter", "Size=5").returncode == 0  # handler and stack remembered
    assert outputs(tmp_path) == {{"Size": "5"}}
    assert simulate(tmp_path, "delete").returncode == 0  # finds the parameter the Create made, and deletes it
    assert not (tmp_path / ".cfn-simulate" / "thing.json").exists()


def test_a_size_out_of_range_is_refused_and_rolled_back(tmp_path: Path) -> None:
    done = simulate(tmp_path, "create", str(PROJECT / "template.yaml"), "--stack-name", "thing", *HANDLER,
                    "--parameter", "Size=0")
    assert done.returncode == 1 and "Size: must be at least 1 (minimum)" in done.stdout
    assert "ROLLBACK_COMPLETE" in done.stdout
    assert simulate(tmp_path, "delete").returncode == 0
'''

README = """\
# {name}

`{rtype}`, a CloudFormation custom resource served by
cfn-provider (the cfn-sns-provider package, as pyproject.toml names it): `src/{package}/thing.py`.

```sh
python -m venv .venv && . .venv/bin/activate   # a virtualenv of its own
pip install -e '.[test]'                        # cfn-sns-provider as pyproject.toml names it
pytest                                          # create -> update -> delete through the real path
cfn-provider simulate create template.yaml --handler '{rtype}={package}.thing:handler' --handler-path src
cfn-provider simulate update --parameter Size=5
cfn-provider simulate delete
cfn-provider run --queue-url ... --topic-arn ... --handler {rtype}   # installed: its entry point
```
"""


GITIGNORE = """\
.cfn-simulate/
__pycache__/
*.egg-info/
.venv/
"""


def scaffold(
    folder: Path, name: str, rtype: str, kind: str = "module", source: provider_source.Source | None = None
) -> list[Path]:
    """Write the project into `folder` (which must not exist, or be empty); the files written. `kind`:
    module (an SDK resource, this module's files) or lambda (a cfnresponse function: scaffold_lambda).
    A module project's pyproject.toml depends on cfn-sns-provider as `source` says (default: where
    the running one came from)."""
    from . import scaffold_lambda

    package = name.lower().replace("-", "_")
    source = source or provider_source.running()
    fields = {
        "name": name,
        "package": package,
        "rtype": rtype,
        "dependency": source.requirement(),
        "test_dependency": source.requirement("simulate"),
        "released": source.released(),
        "released_test": source.released("simulate"),
        "source_said": source.said,
    }
    files = (
        scaffold_lambda.FILES
        if kind == "lambda"
        else {
            "pyproject.toml": PYPROJECT,
            "README.md": README,
            "template.yaml": TEMPLATE,
            f"src/{package}/__init__.py": '"""{rtype}: see thing.py."""\n',
            f"src/{package}/thing.py": THING,
            "tests/test_thing.py": TEST,
            ".gitignore": GITIGNORE,
        }
    )
    written = []
    for relative, text in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**fields), encoding="utf-8")
        written.append(path)
    return written


def resource_type(name: str) -> str:
    return "Custom::" + "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_]+", name) if part)


@click.command("init")
@click.argument("name")
@click.option(
    "--type",
    "rtype",
    metavar="Custom::NAME",
    help="The ResourceType it serves (default: Custom:: and NAME in CamelCase).",
)
@click.option(
    "--template",
    "kind",
    type=click.Choice(["module", "lambda"]),
    default="module",
    show_default=True,
    help="module: a handler package (an SDK resource); lambda: a function written as for Lambda "
    "(cfnresponse), served with --handler 'TYPE=lambda:index.handler'.",
)
def init_command(name: str, rtype: str | None, kind: str) -> None:
    """Start a handler project in ./NAME: a package with one SDK resource, a template, a pytest
    test that drives it create -> update -> delete through the real path (as `simulate` does),
    and packaging that registers it as an entry point (group cfn_provider.handlers). Its test
    passes as generated, in a virtualenv of its own: `cd NAME && python -m venv .venv &&
    .venv/bin/pip install -e '.[test]' && .venv/bin/pytest`. Until cfn-sns-provider is on a package
    index, the project depends on it as installed here: this checkout, or the wheel file it came
    from (pyproject.toml shows the released form beside it).

    With --template lambda: a custom resource function as it is written for Lambda
    (function/index.py, answering with cfnresponse), a template, and a pytest test that sends it
    create -> update -> delete through `cfn-provider local-invoke`; `cd NAME && pytest`."""
    if not _NAME.fullmatch(name):
        raise click.BadParameter("a letter, then letters, digits, '-' or '_' (at most 63)", param_hint="NAME")
    rtype = rtype or resource_type(name)
    if not _TYPE.fullmatch(rtype):
        raise click.BadParameter("Custom:: then letters, digits, '_', '@' or '-'", param_hint="--type")
    folder = Path(name)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ScaffoldError(f"{folder} already exists and is not an empty folder: nothing written")
    source = provider_source.running()
    for path in scaffold(folder, name, rtype, kind, source):
        click.echo(f"wrote {path}")
    if kind == "lambda":
        click.echo(f"\n{rtype} is in {folder / 'function' / 'index.py'}. Next:\n  cd {name} && pytest")
        return
    click.echo(
        f"\n{rtype} is in {folder / 'src' / name.lower().replace('-', '_') / 'thing.py'}.\n"
        f"It depends on {source.said}.\nNext:\n"
        f"  cd {name} && python -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest"
    )
