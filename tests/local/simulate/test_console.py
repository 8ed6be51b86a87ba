"""cfn_provider.local.simulate.console: the progress indicator redrawn in place on a terminal, plain
"still waiting" lines otherwise, and event rows under their header."""

from __future__ import annotations

from cfn_provider.local.simulate import Console, Event


def test_progress_indicator_on_a_terminal_and_plain_lines_otherwise(capsys):
    tty = Console(tty=True)
    for second in range(3):
        tty.progress("Thing Create: waiting for the response", second, 3600)
    tty.event(Event("2030-01-01T00:00:00.000Z", "Thing", "thing-1", "Custom::Echo", "CREATE_COMPLETE"))
    out, err = capsys.readouterr()
    assert err.count("\r\x1b[K") == 4  # three frames redrawn in place, then cleared before the event line
    assert "Thing Create: waiting for the response: 2 s of 3600 s" in err
    assert out.splitlines()[0].split() == [
        "TIMESTAMP",
        "(UTC)",
        "LOGICAL",
        "ID",
        "TYPE",
        "STATUS",
        "PHYSICAL",
        "ID",
        "REASON",
    ]
    assert out.splitlines()[1].split() == [
        "2030-01-01T00:00:00.000Z",
        "Thing",
        "Custom::Echo",
        "CREATE_COMPLETE",
        "thing-1",
    ]

    plain = Console(tty=False)
    for second in range(0, 25):
        plain.progress("Thing Create: waiting for the response", second, 3600)
    _, err = capsys.readouterr()
    assert "\r" not in err
    assert err.splitlines() == [f"... Thing Create: waiting for the response: {s} s of 3600 s" for s in (10, 20)]
