"""metrics.py stands on the ground floor, so it keeps its own list of the request types a label may
name: it must be the wire's (pipeline.request.REQUEST_TYPES), or a real request would count as `other`."""

from cfn_provider.metrics import OTHER, REQUEST_TYPES, request_type_label
from cfn_provider.pipeline import request


def test_the_label_set_is_the_wires_request_types():
    assert REQUEST_TYPES == request.REQUEST_TYPES
    assert [request_type_label(t) for t in request.REQUEST_TYPES] == list(request.REQUEST_TYPES)
    assert request_type_label("Drop") == OTHER
