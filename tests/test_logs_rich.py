"""cfn_provider.logs through the real CLI, with rich importable and with it blocked: a handler's
exception is logged with its traceback, and no format prints a frame's local variables.

A `cfn-provider run --transport web` subprocess (plain HTTP on loopback) serves a web[sync] request
whose handler (tests.support.leaky_handler) raises with a property value, the presigned ResponseURL
and NoEcho Data in its locals. structlog's console renderer picks rich when it can import it, and
rich prints every frame's locals; the test runs the daemon in both formats, in a Python where rich
is importable (the [test] extra installs it) and in one where a sitecustomize blocks it
(`sys.modules["rich"] = None`), and searches every byte the daemon wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import rich  # noqa: F401 - the [test] extra installs it: this test never runs without it

from cfn_provider.trust.web_tokens import new_token
from tests.dialects.conftest import ros_request
from tests.support.daemons import REPO, wait_until
from tests.support.leaky_handler import NOECHO_VALUE
from tests.support.stub_s3 import StubS3
from tests.support.web import free_port, web_subprocess

pytestmark = pytest.mark.slow

PASSWORD = "hunter2-Property-Value-5e1d"
SIGNATURE = "c0ffee" * 10 + "abcd"
BLOCK_RICH = 'import sys\nsys.modules["rich"] = None  # `import rich` raises ImportError\n'


def _python_env(tmp_path: Path, with_rich: bool) -> dict[str, str]:
    """PYTHONPATH for the daemon: the checkout, after a sitecustomize that blocks rich when asked."""
    if with_rich:
        return {"PYTHONPATH": str(REPO)}
    site = tmp_path / "no-rich"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_RICH)
    return {"PYTHONPATH": f"{site}:{REPO}"}


def _rich_importable(env: dict[str, str]) -> bool:
    probe = subprocess.run([sys.executable, "-c", "import rich"], env=env, capture_output=True, timeout=60)
    return probe.returncode == 0


@pytest.mark.parametrize("with_rich", [True, False], ids=["rich", "no-rich"])
@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_raising_handlers_locals_never_reach_the_log(tmp_path: Path, stub_s3: StubS3, fmt: str, with_rich: bool):
    token_file = tmp_path / "web-token"
    token_file.write_text(new_token() + "\n")
    token_file.chmod(0o600)
    port, log_path = free_port(), tmp_path / "daemon.log"
    env = _python_env(tmp_path, with_rich)
    assert _rich_importable({**os.environ, **env}) is with_rich
    daemon = web_subprocess(
        tmp_path,
        stub_s3,
        log_path,
        port=port,
        token_file=token_file,
        cert=None,
        key=None,
        extra=("--handler", "Custom::Leaky=tests.support.leaky_handler", "--log-format", fmt),
        env=env,
    )
    with open(log_path, "a") as out:  # started here: the console format has no JSON `started` line to wait for
        proc = subprocess.Popen(daemon.args, env=daemon.env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_until(lambda: "web.listening" in log_path.read_text() or proc.poll() is not None, 30, "the listener")
        url = stub_s3.url("leak") + f"?Expires=1700000000&X-Amz-Signature={SIGNATURE}"
        req = ros_request("Create", url, rtype="Custom::Leaky", props={"Password": PASSWORD})
        answer = _post(f"http://127.0.0.1:{port}/{token_file.read_text().split()[0]}/sync", req)
        assert answer["Status"] == "FAILED" and "RuntimeError" in answer["Reason"]
        wait_until(lambda: "the backend refused the request" in log_path.read_text(), 30, "the traceback")
    finally:
        proc.kill()
        proc.wait(10)
    text = log_path.read_text()
    assert "Traceback (most recent call last)" in text and "handler.raised" in text  # it was logged, in full
    for leak in (PASSWORD, SIGNATURE, SIGNATURE[:16], NOECHO_VALUE):
        assert leak not in text, f"{leak!r} in the {fmt} log (rich importable: {with_rich}):\n{text}"
    if fmt == "json":
        assert all(json.loads(line) for line in text.splitlines())


def _post(url: str, body: dict) -> dict:
    data = json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST"), timeout=60) as resp:
        return json.loads(resp.read())
