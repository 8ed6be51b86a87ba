"""What a command that could not start shows (cfn_provider.cli_errors): exit 2 and one line, `cfn-provider: <why>`."""

from __future__ import annotations

import subprocess

from click.testing import Result


def assert_not_started(result: Result | subprocess.CompletedProcess[str], *says: str, code: int = 2) -> str:
    """`result` (a CliRunner result, or a finished subprocess with text output) exited `code` with
    its reason as the last line of stderr, `cfn-provider: ...` holding each of `says`: one line, no
    traceback, said once. The line, for more checks."""
    exit_code = result.exit_code if isinstance(result, Result) else result.returncode
    stderr = result.stderr or ""
    shown = [line for line in stderr.splitlines() if line.strip()]
    assert exit_code == code, (exit_code, result.stdout, stderr)
    assert "Traceback" not in stderr and "Traceback" not in result.stdout, stderr
    assert shown and shown[-1].startswith("cfn-provider: "), stderr
    assert [line for line in shown if line.startswith("cfn-provider:")] == shown[-1:], stderr
    for text in says:
        assert text in shown[-1], (text, shown[-1])
    return shown[-1]
