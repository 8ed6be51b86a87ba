"""An independent DynamoDB for the tests: dynalite (npm, 4.0.0), in memory, on 127.0.0.1.

moto's DynamoDB evaluates a condition and applies the write as two unlocked steps
(tests/support/moto_dynamodb.py patches that for the fleet test); dynalite locks each item for
a write, as DynamoDB does, so a suite that races fleet members on one table uses it instead.

`make test` / `make chaos` install it with npm into the virtualenv's folder (`<venv>/node`, the
Makefile's dynalite stamp); `$CFN_DYNALITE` may name another cli.js. It has no UpdateTimeToLive
(TTL is a sweeper that deletes expired items; the daemon already treats an item past its
`expires_at` as absent), so the table is made as `bootstrap` makes it, less the TTL setting.

    with Dynalite() as db:                  # node <venv>/node/node_modules/dynalite/cli.js --port P
        db.endpoint, db.port
        db.create_table("fleet-state")      # cfn_provider.ops.bootstrap.ensure_table, on this endpoint
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from cfn_provider.local.emulator import REGION, TEST_CREDENTIALS

VERSION = "4.0.0"
INSTALL_HINT = (
    f"run `make test` (its dynalite stamp target installs it), or by hand: "
    f"`npm install --no-save --prefix {Path(sys.prefix) / 'node'} dynalite@{VERSION}` "
    "(needs node >= 20 and npm: `apt-get install nodejs npm`); or set CFN_DYNALITE to its cli.js"
)


class DynaliteMissing(RuntimeError):
    pass


def cli_path() -> Path:
    """dynalite's cli.js: $CFN_DYNALITE, else the one the Makefile installs into this virtualenv."""
    given = os.environ.get("CFN_DYNALITE")
    path = Path(given) if given else Path(sys.prefix) / "node" / "node_modules" / "dynalite" / "cli.js"
    if not path.is_file():
        raise DynaliteMissing(f"dynalite is not installed (no {path}): {INSTALL_HINT}")
    if shutil.which("node") is None:
        raise DynaliteMissing(f"node is not installed, so dynalite cannot run: {INSTALL_HINT}")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Dynalite:
    """A dynalite process on 127.0.0.1 (a free port), in memory; stopped (killed) by stop()."""

    def __init__(self, log_path: Path | None = None):
        self.cli = cli_path()
        self.log_path = log_path
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> Dynalite:
        for _ in range(5):  # a port found free can be taken before dynalite binds it
            self.port = _free_port()
            log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
            self.proc = subprocess.Popen(
                [
                    "node",
                    str(self.cli),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--createTableMs",
                    "0",
                    "--deleteTableMs",
                    "0",
                    "--updateTableMs",
                    "0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return self
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"dynalite did not start on 127.0.0.1 (see {self.log_path})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> Dynalite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self) -> Any:
        return boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(retries={"max_attempts": 3}),
        )

    def create_table(self, table: str) -> None:
        """The fleet table as `cfn-provider bootstrap --dynamodb-table` makes it (see make_table)."""
        make_table(self.client(), table)


def make_table(client: Any, table: str) -> None:
    """The fleet table as `cfn-provider bootstrap --dynamodb-table` makes it (ensure_table: its key and
    its `polls` index), on `client`'s dynalite, except the TTL setting, which dynalite does not implement."""
    from botocore.exceptions import ClientError

    from cfn_provider.ops.bootstrap import ensure_table

    try:
        ensure_table(client, table)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "UnknownOperationException":
            raise
    client.describe_table(TableName=table)  # made, whatever the TTL step said
