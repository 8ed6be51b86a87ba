"""bench.ablate_daemon takes out exactly the part each name says, and refuses a name it does not know
(a typo must not measure the whole daemon under another name)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bench import ablate_daemon
from cfn_provider.metrics import Metrics
from cfn_provider.pipeline.outcome import Outcome
from cfn_provider.stores.sqlite import SQLiteStore
from cfn_provider.trust.urls import ResponseUrlPolicy, UrlRejected

FOREIGN = "http://169.254.169.254/latest/meta-data/"


def test_names_are_checked() -> None:
    assert ablate_daemon.parse(" log, urls ,") == ("log", "urls")
    with pytest.raises(ValueError, match="unknown ablation lgo"):
        ablate_daemon.parse("lgo,urls")


def test_urls_takes_out_the_response_url_rules_only(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UrlRejected):
        ResponseUrlPolicy().check(FOREIGN)
    ablate_daemon.install(["urls"], monkeypatch.setattr)
    ResponseUrlPolicy().check(FOREIGN)  # no longer refused


def test_log_writes_the_bare_line_the_bench_counts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ablate_daemon.install(["log"], monkeypatch.setattr)
    outcome = Outcome(name="answered", status="SUCCESS")
    outcome.log("request", None, 0.0)  # type: ignore[arg-type]  # the bare line reads no request
    assert json.loads(capsys.readouterr().out) == {"event": "request", "outcome": "answered"}


def test_metrics_stops_the_per_request_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = Metrics()
    metrics.watch(lambda: 0, lambda: 0)
    metrics.request_done("Create", "answered", "SUCCESS")
    assert metrics.summary()["answered"] == 1
    ablate_daemon.install(["metrics"], monkeypatch.setattr)
    metrics.request_done("Create", "answered", "SUCCESS")
    metrics.handler_ran("Custom::X", "Create", 0.1)
    assert metrics.summary()["answered"] == 0


def test_durable_stores_the_body_on_the_loop_and_it_is_read_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ablate_daemon.install(["durable"], monkeypatch.setattr)
    store = SQLiteStore(tmp_path / "state.db")

    def no_thread(*_: object) -> None:
        raise AssertionError("the body went to the store's thread")

    async def go() -> None:
        claim = await store.claim("k", "me", "digest", 60, token="t")
        assert claim.acquired
        monkeypatch.setattr(store._thread, "run_durable", no_thread)
        assert await store.save_response("k", "t", "SUCCESS", b'{"Status":"SUCCESS"}')
        record = await store.get("k")
        assert record is not None and record.body == b'{"Status":"SUCCESS"}'

    try:
        asyncio.run(go())
    finally:
        asyncio.run(store.close())
