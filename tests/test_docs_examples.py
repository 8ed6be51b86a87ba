"""Every complete example in README.md and docs/*.md works as written.

The convention (docs/architecture.md, "Examples in the docs"): a fenced block of Python, YAML or
JSON, or a shell block with a `cfn-provider simulate` line, carries a marker on the line before it:
- `<!-- example: NAME -->`: part of the page's example NAME. Its Python/YAML blocks are files (the
  first line names the file: `# mypkg/thing.py`), its shell blocks' `cfn-provider simulate` lines
  are typed, in order, in a fresh folder holding those files (other lines are not run). An example
  creates, updates (a property changes) and deletes its stack: each command exits 0.
  `<!-- example: NAME, base: OTHER -->`: OTHER's files and commands, with NAME's files on top.
- `<!-- not-run: WHY -->`: a fragment or sketch, not run (a CloudFormation template among them is
  still checked with cfn-lint).
- `<!-- run-by: tests/PATH.py -->`: run by a test of its own (one that needs more than `simulate`,
  e.g. a daemon with its configuration file); that test must exist and read the page.
A new block of those kinds without a marker fails this test, naming its page and line.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.stack_emulators import stop_stack_emulators

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CLI = Path(sys.executable).with_name("cfn-provider")
FILE_LANGS = {"python", "py", "yaml", "yml", "json"}
SHELL_LANGS = {"sh", "bash", "shell", "console", ""}
_MARKER = re.compile(r"^<!--\s*(example|not-run|run-by):\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str
    kind: str | None = None  # "example" | "not-run" | "run-by" | None
    value: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def needs_marker(self) -> bool:
        return self.lang in FILE_LANGS or (self.lang in SHELL_LANGS and "cfn-provider simulate" in self.text)


@dataclass
class Example:
    page: str
    name: str
    base: str | None = None
    blocks: list[Block] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}#{self.name}"


def parse(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        block = Block(str(page.relative_to(REPO)), i + 1, fence.group(1).lower(), "\n".join(lines[i + 1 : end]) + "\n")
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(before.strip())
        if marker:
            block.kind, block.value = marker.group(1), marker.group(2)
        blocks.append(block)
        i = end + 1
    return blocks


ALL_BLOCKS = [b for page in PAGES for b in parse(page)]


def examples() -> dict[str, Example]:
    found: dict[str, Example] = {}
    for block in ALL_BLOCKS:
        if block.kind != "example":
            continue
        name, _, rest = block.value.partition(",")
        base = rest.partition("base:")[2].strip() or None
        example = found.setdefault(f"{block.page}#{name.strip()}", Example(block.page, name.strip(), base))
        example.base = example.base or base
        example.blocks.append(block)
    return found


EXAMPLES = examples()


def files_of(example: Example) -> dict[str, str]:
    files = files_of(EXAMPLES[f"{example.page}#{example.base}"]) if example.base else {}
    for block in example.blocks:
        if block.lang in FILE_LANGS:
            files[block.text.splitlines()[0].lstrip("#").strip()] = block.text
    return files


def commands_of(example: Example) -> list[list[str]]:
    commands = []
    for block in example.blocks:
        if block.lang in SHELL_LANGS:
            for line in block.text.splitlines():
                words = shlex.split(line, comments=True)
                if words[:2] in (["cfn-provider", "simulate"], [".venv/bin/cfn-provider", "simulate"]):
                    commands.append(words[1:])
    if not commands and example.base:
        return commands_of(EXAMPLES[f"{example.page}#{example.base}"])
    return commands


# ------------------------------------------------------------------------------ the convention


def test_every_example_or_fragment_is_marked():
    unmarked = [b.where for b in ALL_BLOCKS if b.needs_marker and b.kind is None]
    assert not unmarked, (
        "these code blocks are neither run nor marked as fragments: add <!-- example: NAME --> "
        f"or <!-- not-run: WHY --> on the line before each (docs/architecture.md): {unmarked}"
    )
    assert all(b.value for b in ALL_BLOCKS if b.kind == "not-run"), "a not-run marker says why"
    for block in (b for b in ALL_BLOCKS if b.kind == "run-by"):
        test = REPO / block.value
        assert test.is_file() and test.name.startswith("test_"), f"{block.where}: run-by names no test file"
        assert Path(block.page).name in test.read_text(), f"{block.where}: {block.value} does not read {block.page}"
    assert len(EXAMPLES) >= 6  # README's first handler, handlers.md's five, porting-lambda.md's seeded function


def test_every_pip_line_installs_what_exists_and_the_released_form_is_said_to_be_one():
    """cfn-sns-provider is on no package index yet: a `pip install` of it names the checkout or
    `make dist`'s wheel (a path: nothing on an index can stand in for it); the name alone appears
    only as the released form, said so on its line."""
    wrong = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for command in re.findall(r"pip install [^`\n]*cfn-sns-provider[^`\n]*", line):
                if "dist/cfn_sns_provider-" in command or "released" in line:
                    continue
                wrong.append(f"{page.name}:{number}: {command}")
    assert not wrong, wrong


def test_no_simulate_command_is_given_inline_where_no_test_runs_it():
    """A `cfn-provider simulate ...` a reader is told to type is a marked block the test runs (with
    the files it needs), never an inline command beside a fragment of a template."""
    inline = []
    for page in PAGES:
        prose = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        inline += [
            f"{page.name}: {m}"
            for m in re.findall(r"`((?:\S*/)?cfn-provider simulate (?:create|update|delete)[^`]*)`", prose)
        ]
    assert not inline, inline


@pytest.mark.parametrize("example", list(EXAMPLES.values()), ids=lambda e: e.id)
def test_each_example_is_complete(example: Example):
    assert example.base is None or f"{example.page}#{example.base}" in EXAMPLES, f"{example.id}: no base {example.base}"
    files = files_of(example)
    for block in example.blocks:
        if block.lang in FILE_LANGS:
            name = block.text.splitlines()[0]
            assert re.fullmatch(r"# [\w./-]+\.\w+", name), (
                f"{block.where}: the first line names the file (# mypkg/thing.py)"
            )
    kinds = [c[1] for c in commands_of(example)]
    assert kinds[:1] == ["create"] and "update" in kinds and kinds[-1] == "delete", (example.id, kinds)
    template = commands_of(example)[0][2]
    assert template in files, f"{example.id}: creates from {template}, which no block of the example writes"


# ------------------------------------------------------------------------------ running them


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CFN_PROVIDER_"))}


def _resource_rows(stdout: str, status: str) -> list[str]:
    return [
        line
        for line in stdout.splitlines()
        if line[:4].isdigit()
        and line.split()[2:4] != ["AWS::CloudFormation::Stack", status]
        and line.split()[3:4] == [status]
    ]


@pytest.mark.slow
@pytest.mark.parametrize("example", list(EXAMPLES.values()), ids=lambda e: e.id)
def test_example_runs_as_written(example: Example, tmp_path: Path):
    for name, text in files_of(example).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    try:
        for args in commands_of(example):
            done = subprocess.run(
                [str(CLI), *args], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180
            )
            shown = f"$ cfn-provider {shlex.join(args)}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
            assert done.returncode == 0, shown
            assert "Traceback" not in done.stderr, shown
            if args[1] == "create":
                assert re.search(r"^Stack \S+: CREATE_COMPLETE$", done.stdout, re.M), shown
            elif args[1] == "update":  # a property changed: a custom resource was updated
                assert _resource_rows(done.stdout, "UPDATE_COMPLETE"), shown
                assert re.search(r"^Stack \S+: UPDATE_COMPLETE$", done.stdout, re.M), shown
            elif args[1] == "delete":
                assert re.search(r"^Stack \S+: DELETE_COMPLETE$", done.stdout, re.M), shown
        assert not list(tmp_path.glob(".cfn-simulate/*.json")), "the stack is gone"
    finally:
        stop_stack_emulators(tmp_path)


def test_not_run_cloudformation_templates_pass_cfn_lint():
    from cfn_provider.local.template.lint import lint

    checked = 0
    for block in ALL_BLOCKS:
        if (
            block.kind == "not-run"
            and block.lang in ("yaml", "yml")
            and "Resources:" in block.text
            and "ROSTemplateFormatVersion" not in block.text
            and "ALIYUN::" not in block.text
        ):
            errors = [str(f) for f in lint(block.where, block.text) if f.error]
            assert not errors, errors
            checked += 1
    assert checked >= 1  # docs/operating.md's consumer template
