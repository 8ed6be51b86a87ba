"""daemon.router: ResourceType -> handler, from configuration and entry points."""
from __future__ import annotations

import importlib.metadata
import sys

import pytest

import handlers.echo
from daemon import router as router_module
from daemon.router import ENTRY_POINT_GROUP, HandlerError, Router, parse_handler_option
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
    assert handler_for(configured(("Custom::E", "handlers.echo")), "Custom::E") is handlers.echo


# --- entry points -----------------------------------------------------------------------

def test_installed_entry_point_for_custom_echo_is_found():
    route = Router().route("Custom::Echo")
    assert route is not None
    assert route.handler() is handlers.echo
    assert "entry point" in route.source


def test_configured_handler_overrides_the_entry_point():
    r = Router([("Custom::Echo", f"{SPEC}:other")])
    assert handler_for(r, "Custom::Echo") is fx.other
    assert r.route("Custom::Echo").source == "config"


def test_entry_points_load_on_first_use_and_fail_naming_the_plugin(monkeypatch):
    broken = importlib.metadata.EntryPoint(name="Custom::Broken", value="tests.support.no_such_module",
                                           group=ENTRY_POINT_GROUP)
    monkeypatch.setattr(router_module, "entry_points", lambda group: [broken] if group == ENTRY_POINT_GROUP else [])
    r = Router()  # constructing does not load it
    with pytest.raises(HandlerError, match="tests.support.no_such_module") as info:
        r.route("Custom::Broken").handler()
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

@pytest.mark.parametrize("value, expected", [
    ("Custom::Thing=mypkg.thing", ("Custom::Thing", "mypkg.thing")),
    ("Custom::Thing=mypkg.thing:handler", ("Custom::Thing", "mypkg.thing:handler")),
    (" Custom::Acme* = mypkg.acme ", ("Custom::Acme*", "mypkg.acme")),
])
def test_parse_handler_option(value, expected):
    assert parse_handler_option(value) == expected


@pytest.mark.parametrize("value", ["", "Custom::Thing", "=mypkg.thing", "Custom::Thing=", " = ", "Custom::Thing mypkg"])
def test_parse_handler_option_errors_name_the_format(value):
    with pytest.raises(ValueError, match="TYPE=MODULE"):
        parse_handler_option(value)
