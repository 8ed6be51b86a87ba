"""State at rest: state and key files open to other users are fixed (ours) or refused (not ours)."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from cfn_provider import cli
from cfn_provider.stores.sqlite import SQLiteStore
from cfn_provider.trust import at_rest
from cfn_provider.trust.at_rest import StateExposed, secure, secure_key_files, secure_sqlite
from tests.support.cli import assert_not_started

ME = os.geteuid()
SOMEONE_ELSE = ME + 4242


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def make(path: Path, perm: int, data: bytes = b"secret") -> Path:
    path.write_bytes(data)
    os.chmod(path, perm)
    return path


@pytest.mark.parametrize("perm", [0o644, 0o640, 0o604, 0o666, 0o660, 0o602])
def test_our_file_open_to_others_is_fixed_and_logged(tmp_path, perm):
    path = make(tmp_path / "state.db", perm)
    with capture_logs() as logs:
        secure(path, "state file")
    assert mode(path) == perm & 0o700
    [event] = [e for e in logs if e["event"] == "state.permissions_fixed"]
    assert event["path"] == str(path) and event["was"] == f"{perm:04o}"


def test_a_private_or_missing_file_is_left_alone(tmp_path):
    path = make(tmp_path / "state.db", 0o600)
    with capture_logs() as logs:
        secure(path, "state file")
        secure(tmp_path / "absent.db", "state file")
    assert mode(path) == 0o600 and logs == []


@pytest.mark.parametrize("perm", [0o644, 0o640, 0o660, 0o604])
def test_someone_elses_file_open_to_others_is_refused_naming_file_mode_and_fix(tmp_path, perm):
    path = make(tmp_path / "state.db", perm)
    with pytest.raises(StateExposed) as exc:
        secure(path, "state file", euid=SOMEONE_ELSE)
    text = str(exc.value)
    assert str(path) in text and f"{perm:04o}" in text and "chmod go-rwx" in text
    assert mode(path) == perm  # not ours to change


def test_sqlite_siblings_are_checked_too(tmp_path):
    db = make(tmp_path / "state.db", 0o600)
    wal, shm = make(tmp_path / "state.db-wal", 0o644), make(tmp_path / "state.db-shm", 0o644)
    secure_sqlite(db, state_dir=tmp_path / "elsewhere")
    assert (mode(db), mode(wal), mode(shm)) == (0o600, 0o600, 0o600)


def test_the_daemons_own_state_directory_is_fixed_but_an_operators_directory_is_left_alone(tmp_path):
    own, chosen = tmp_path / "own", tmp_path / "chosen"
    for d in (own, chosen):
        d.mkdir()
        os.chmod(d, 0o755)
    secure_sqlite(own / "state.db", state_dir=own)
    secure_sqlite(chosen / "state.db", state_dir=own)
    assert (mode(own), mode(chosen)) == (0o700, 0o755)
    os.chmod(own, 0o750)
    with pytest.raises(StateExposed, match="state directory"):
        secure_sqlite(own / "state.db", state_dir=own, euid=SOMEONE_ELSE)


def test_key_file_rules(tmp_path):
    key = make(tmp_path / "key", 0o644, os.urandom(32))
    secure_key_files({"CFN_PROVIDER_SECRET_KEY_FILE": str(key)})
    assert mode(key) == 0o600  # ours: fixed
    os.chmod(key, 0o440)
    secure_key_files({"CFN_PROVIDER_SECRET_KEY_FILE": str(key)}, euid=SOMEONE_ELSE)  # root:group 0440 is fine
    os.chmod(key, 0o444)
    with pytest.raises(StateExposed, match="CFN_PROVIDER_SECRET_KEY_FILE.*chmod o-rwx"):
        secure_key_files({"CFN_PROVIDER_SECRET_KEY_FILE": str(key)}, euid=SOMEONE_ELSE)
    secure_key_files({})  # no key configured: nothing to check


def test_key_file_variables_are_the_handlers():
    from cfn_provider.handlers import random_secret

    assert random_secret.KEY_ENV in at_rest.KEY_FILE_VARIABLES


async def test_the_sqlite_store_fixes_a_world_readable_state_file_before_using_it(tmp_path):
    path = tmp_path / "state.db"
    sqlite3.connect(path).close()
    os.chmod(path, 0o644)
    store = SQLiteStore(path)
    try:
        assert mode(path) == 0o600
    finally:
        await store.close()


async def test_the_sqlite_store_refuses_someone_elses_world_readable_state_file(tmp_path, monkeypatch):
    path = make(tmp_path / "state.db", 0o644, b"")
    monkeypatch.setattr(at_rest.os, "geteuid", lambda: SOMEONE_ELSE)  # the file is then someone else's
    with pytest.raises(StateExposed, match="state file"):
        SQLiteStore(path)
    assert mode(path) == 0o644


def test_run_refuses_at_start_with_a_clear_error(tmp_path, monkeypatch):
    """`cfn-provider run` exits 2 before serving anything, naming the file and the fix."""
    path = make(tmp_path / "state.db", 0o644, b"")
    monkeypatch.setattr(at_rest.os, "geteuid", lambda: SOMEONE_ELSE)
    monkeypatch.setattr("cfn_provider.logs.configure", lambda *a, **k: None)
    for name in list(os.environ):
        if name.startswith("CFN_PROVIDER_"):
            monkeypatch.delenv(name)
    result = CliRunner().invoke(
        cli.main, ["run", "--queue-url", "http://127.0.0.1:9/1/q", "--state", f"sqlite://{path}"]
    )
    assert_not_started(result, f"state file {path} is open to group/others (mode 0644)", "chmod go-rwx")
