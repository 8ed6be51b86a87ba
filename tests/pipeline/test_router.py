"""cfn_provider.pipeline.router: ResourceType -> handler, from configuration and entry points."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

import cfn_provider.handlers.echo
from cfn_provider.pipeline import router as router_module
from cfn_provider.pipeline.router import ENTRY_POINT_GROUP, HandlerError, Router, parse_handler_option
from tests.support import router_fixtures as fx

SPEC = "tests.support.router_fixtures"


def configured(*pairs: tuple[str, str]) -> Router:
    return Router(pairs, use_entry_points=False)


def handler_for(router: Router, resource_type: str):
    route = router.route(resource_type)
    return None if route is None else route.handler()


# --- precedence -------------------------------------------------------------------------


def test_exact_type_beats_a_matching_glob():
    r = configured(("Custom::*", f"{SPEC}:short_glob"), ("Custom::Bucket", f"{SPEC}:exact"))
    assert handler_for(r, "Custom::Bucket") is fx.exact
    assert handler_for(r, "Custom::Queue") is fx.short_glob


def test_longest_glob_wins_whatever_the_configuration_order():
    pairs = [("Custom::*", f"{SPEC}:short_glob"), ("Custom::Acme*", f"{SPEC}:long_glob")]
    for order in (pairs, pairs[::-1]):
        r = configured(*order)
        assert handler_for(r, "Custom::AcmeBucket") is fx.long_glob
        assert handler_for(r, "Custom::Other") is fx.short_glob


def test_equal_length_globs_route_deterministically():
    a, b = ("Custom::A?c*", f"{SPEC}:short_glob"), ("Custom::?bc*", f"{SPEC}:long_glob")
    first = handler_for(configured(a, b), "Custom::Abcd")
    assert handler_for(configured(b, a), "Custom::Abcd") is first


def test_glob_matching_is_case_sensitive_and_whole_name():
    r = configured(("Custom::Acme*", f"{SPEC}:long_glob"))
    assert r.route("Custom::acmeBucket") is None
    assert r.route("Other::Custom::AcmeBucket") is None


def test_unknown_type_has_no_route():
    assert configured(("Custom::Bucket", f"{SPEC}:exact")).route("Custom::Queue") is None


def test_configured_objects_are_used_as_they_are():
    r = Router([("Custom::Obj", fx.other)], use_entry_points=False)
    assert handler_for(r, "Custom::Obj") is fx.other


def test_configured_module_spec_without_attribute_is_the_module():
    assert (
        handler_for(configured(("Custom::E", "cfn_provider.handlers.echo")), "Custom::E") is cfn_provider.handlers.echo
    )


# --- entry points -----------------------------------------------------------------------

BUILT_INS = ("Custom::Command", "Custom::Echo", "Custom::ElasticIpPool", "Custom::RandomSecret", "Custom::Wait")


def test_installed_entry_points_are_available_but_not_served_unless_named():
    r = Router()
    for rtype in BUILT_INS:
        assert r.route(rtype) is None, rtype  # installing the package serves nothing
    assert {route.pattern for route in r.available} >= set(BUILT_INS)
    assert all(route.source == "built-in" for route in r.available if route.pattern in BUILT_INS)


def test_a_bare_type_serves_the_entry_point_of_that_name_and_only_it():
    r = Router([("Custom::Echo", None)])
    route = r.route("Custom::Echo")
    assert route is not None and route.handler() is cfn_provider.handlers.echo and route.source == "built-in"
    assert r.route("Custom::RandomSecret") is None and r.route("Custom::Command") is None
    assert "Custom::Echo" not in {a.pattern for a in r.available}


def test_naming_a_type_no_entry_point_has_fails_at_start_listing_what_is_available():
    with pytest.raises(
        HandlerError, match="no built-in or installed entry point is registered as Custom::Nope"
    ) as info:
        Router([("Custom::Nope", None)])
    assert "Custom::RandomSecret" in str(info.value)
    with pytest.raises(HandlerError, match="registered as Custom::Echo; available: none"):
        Router([("Custom::Echo", None)], use_entry_points=False)


@pytest.mark.parametrize(
    "value, parsed", [("Custom::Echo", ("Custom::Echo", None)), (" Custom::X = m.x ", ("Custom::X", "m.x"))]
)
def test_handler_option_takes_a_bare_type_or_type_equals_module(value, parsed):
    assert parse_handler_option(value) == parsed


@pytest.mark.parametrize("value", ["", "=m", "Custom::X=", "Custom::*"])
def test_handler_option_rejects_empty_parts_and_bare_patterns(value):
    with pytest.raises(ValueError):
        parse_handler_option(value)


def test_configured_handler_overrides_the_entry_point():
    r = Router([("Custom::Echo", f"{SPEC}:other")])
    assert handler_for(r, "Custom::Echo") is fx.other
    assert r.route("Custom::Echo").source == "module"


def test_named_entry_points_load_at_start_and_fail_naming_the_plugin(monkeypatch):
    broken = importlib.metadata.EntryPoint(
        name="Custom::Broken", value="tests.support.no_such_module", group=ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(router_module, "entry_points", lambda group: [broken] if group == ENTRY_POINT_GROUP else [])
    r = Router()  # available, not named: not loaded
    assert r.route("Custom::Broken") is None
    with pytest.raises(HandlerError, match="tests.support.no_such_module") as info:
        Router([("Custom::Broken", None)])
    assert "Custom::Broken" in str(info.value)


# --- load failures fail fast, naming the spec -------------------------------------------


@pytest.mark.parametrize("attr, missing", [("no_delete", "delete"), ("not_callable_update", "update")])
def test_handler_missing_an_action_fails_at_construction_naming_the_spec(attr, missing):
    with pytest.raises(HandlerError) as info:
        configured(("Custom::X", f"{SPEC}:{attr}"))
    message = str(info.value)
    assert f"{SPEC}:{attr}" in message and missing in message


def test_configured_object_missing_actions_fails_at_construction():
    with pytest.raises(HandlerError, match="create, update, delete"):
        Router([("Custom::X", object())], use_entry_points=False)


def test_module_that_does_not_exist_fails_naming_it():
    with pytest.raises(HandlerError, match="tests.support.no_such_module"):
        configured(("Custom::X", "tests.support.no_such_module"))


def test_missing_attribute_fails_naming_the_spec():
    with pytest.raises(HandlerError, match=f"{SPEC}:nope"):
        configured(("Custom::X", f"{SPEC}:nope"))


def test_module_that_raises_on_import_fails_naming_it(tmp_path, monkeypatch):
    (tmp_path / "exploding_handler.py").write_text("raise RuntimeError('kaboom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "exploding_handler", raising=False)
    with pytest.raises(HandlerError) as info:
        configured(("Custom::Boom", "exploding_handler"))
    message = str(info.value)
    assert "exploding_handler" in message and "kaboom at import" in message and "Custom::Boom" in message


# --- parse_handler_option ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("Custom::Thing=mypkg.thing", ("Custom::Thing", "mypkg.thing")),
        ("Custom::Thing=mypkg.thing:handler", ("Custom::Thing", "mypkg.thing:handler")),
        (" Custom::Acme* = mypkg.acme ", ("Custom::Acme*", "mypkg.acme")),
    ],
)
def test_parse_handler_option(value, expected):
    assert parse_handler_option(value) == expected


@pytest.mark.parametrize("value", ["", "=mypkg.thing", "Custom::Thing=", " = ", "Custom::Thing mypkg"])
def test_parse_handler_option_errors_name_the_format(value):
    with pytest.raises(ValueError, match="TYPE=MODULE"):
        parse_handler_option(value)
