"""cfn_provider.functions.target.parse_target: a Handler string is accepted or refused as Lambda's Python
runtime (awslambdaric's _get_handler: split at the last dot, `/` read as `.`, importlib) takes it."""

from __future__ import annotations

import pytest

from cfn_provider.functions.target import parse_target
from cfn_provider.pipeline.router import parse_handler_option

ACCEPTED = [
    ("index.handler", ("index", "handler")),
    ("update-iam-role.handler", ("update-iam-role", "handler")),  # a real Quick Start's Handler
    ("pkg.mod.handler", ("pkg.mod", "handler")),
    ("dir/mod.handler", ("dir.mod", "handler")),
    ("my-dir/sub-mod.lambda_handler", ("my-dir.sub-mod", "lambda_handler")),
    ("lambda_function.lambda_handler", ("lambda_function", "lambda_handler")),
    ("index.handler-v2", ("index", "handler-v2")),  # getattr takes any name
    ("src/2024_fn.main", ("src.2024_fn", "main")),
    ("pkg.mod:handler", ("pkg.mod", "handler")),  # the daemon's own MODULE:FUNCTION
    ("pkg.mod:Thing.handler", ("pkg.mod", "Thing.handler")),
]

REFUSED = [
    ("index", "no dot"),
    ("index/handler", "no dot"),
    ("index.", "empty"),
    (".handler", "empty"),
    ("/var/task/index.handler", "relative"),
    (".index.handler", "relative"),
    ("sys.handler", "built-in module"),
    ("builtins.handler", "built-in module"),
    ("index .handler", "no whitespace"),
    ("a" * 127 + ".h", "1 to 128 characters"),  # 129
    ("", "1 to 128 characters"),
    ("index:", "after the colon"),
    ("index:not-a-name", "after the colon"),
]


@pytest.mark.parametrize("handler, expected", ACCEPTED)
def test_every_handler_lambda_accepts_is_accepted(handler, expected):
    assert parse_target("lambda:" + handler) == expected
    assert parse_handler_option(f"Custom::Thing=lambda:{handler}") == ("Custom::Thing", f"lambda:{handler}")


@pytest.mark.parametrize("handler, why", REFUSED)
def test_what_lambda_refuses_is_refused_saying_why(handler, why):
    with pytest.raises(ValueError, match=why):
        parse_target("lambda:" + handler)


def test_the_longest_handler_lambda_allows_is_accepted():
    assert parse_target("lambda:" + "a" * 126 + ".h") == ("a" * 126, "h")  # 128 characters
