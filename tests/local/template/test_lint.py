"""cfn_provider.local.template.lint: cfn-lint as a library on a template's text: findings as
FILE:LINE:COLUMN: RULE message, errors raised together, warnings returned; without cfn-lint, the
extra to install. (simulate's use of it: tests/local/simulate/test_template_checks.py.)"""

from __future__ import annotations

import sys
import textwrap

import pytest

from cfn_provider.local.template import Template, TemplateError, loads
from cfn_provider.local.template.lint import MissingExtra, check, lint
from tests.local.template.helpers import UNDEFINED


def test_the_template_engine_refuses_an_undefined_ref_in_a_service_token_too():
    with pytest.raises(TemplateError, match=r"Unresolved resource dependencies \[ServiceTokn\]"):
        Template(loads(textwrap.dedent(UNDEFINED).replace("Peer: !GetAtt Thingy.Url", "Size: 3")))


def test_yaml_errors_name_the_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("Resources:\n  A:\n    Type: Custom::X\n   Bad: [\n")
    findings = lint(str(path), path.read_text())
    assert findings and findings[0].rule == "E0000" and str(findings[0]).startswith(f"{path}:")
    with pytest.raises(TemplateError, match=r'in "t.yaml", line 4') as info:
        loads(path.read_text(), "t.yaml")
    assert "<unicode string>" not in str(info.value)


def test_check_lists_every_error_and_returns_the_warnings():
    with pytest.raises(TemplateError) as info:
        check("t.yaml", textwrap.dedent(UNDEFINED))
    assert "t.yaml: cfn-lint found 2 error(s); nothing was run:" in str(info.value)
    assert "t.yaml:5:7: E1020 'ServiceTokn' is not one of" in str(info.value)
    assert [
        f.rule
        for f in check(
            "t.yaml",
            "Parameters:\n  P: {Type: String}\nResources:\n  A:\n"
            "    Type: Custom::X\n    Properties: {ServiceToken: x}\n",
        )
    ] == ["W2001"]


def test_without_cfn_lint_it_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cfnlint.api", None)  # as when cfn-lint is not installed
    with pytest.raises(
        MissingExtra, match=r"simulate needs cfn-lint .*pip install -e '.*\[simulate\]'"
    ):  # this checkout
        lint("t.yaml", "Resources: {}\n")
