"""docs/openapi.yaml describes every route the application serves, with the methods it answers,
and is a valid OpenAPI 3.1 document."""

from __future__ import annotations

import re

import tornado.web
import yaml
from openapi_spec_validator import validate

from lbauth.app import ROUTES
from tests.conftest import ROOT

DOCUMENT = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())


def _normal(path: str) -> str:
    """/a/{clientId}/b and the route /a/([^/]+)/b both become /a/{}/b."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def _served() -> dict[str, set[str]]:
    """Each route as an OpenAPI path, with the methods its handler implements."""
    base = tornado.web.RequestHandler
    served = {}
    for pattern, handler in ROUTES:
        path = _normal(re.sub(r"\([^)]*\)", "{}", re.sub(r"/\?$", "/", pattern).replace("\\", "")))
        methods = {m.lower() for m in handler.SUPPORTED_METHODS
                   if getattr(handler, m.lower()) is not getattr(base, m.lower())}
        served[path] = methods
    return served


def test_document_is_valid_openapi_3_1():
    assert DOCUMENT["openapi"].startswith("3.1")
    validate(DOCUMENT)


def test_every_route_and_method_is_described():
    paths = {_normal(p): item for p, item in DOCUMENT["paths"].items()}
    for path, methods in _served().items():
        assert path in paths, f"{path} is served but not in docs/openapi.yaml"
        described = {m for m in paths[path] if m in ("get", "post", "put", "patch", "delete", "options")}
        assert methods == described, (path, methods, described)


def test_nothing_is_described_that_is_not_served():
    served = _served()
    for path in DOCUMENT["paths"]:
        if path.startswith("/static/"):
            continue
        assert _normal(path) in served, f"{path} is in docs/openapi.yaml but not served"
