"""docs/openapi.json matches the code: the route table in src/api/router.c and
the request fields accepted by src/core/spec.c.  Static checks only: no
daemon is started and none of the daemon fixtures are used."""
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPENAPI = os.path.join(ROOT, "docs", "openapi.json")
ROUTER = os.path.join(ROOT, "src", "api", "router.c")
SPEC_C = os.path.join(ROOT, "src", "core", "spec.c")

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def doc():
    return json.loads(read(OPENAPI))


def normalise(path):
    """/v1/sandboxes/{id}/exec and /v1/sandboxes/{}/exec -> /v1/sandboxes/{}/exec"""
    return re.sub(r"\{[^}/]*\}", "{}", path)


def router_routes():
    text = read(ROUTER)
    table = re.search(r"struct fb_route routes\[\]\s*=\s*\{(.*?)\n\};", text, re.S)
    assert table, "route table not found in router.c"
    routes = re.findall(r'\{\s*"([A-Z]+)"\s*,\s*"([^"]+)"', table.group(1))
    assert routes, "no routes parsed from router.c"
    return {(m.lower(), normalise(p)) for m, p in routes}


def documented_routes(doc):
    out = set()
    for path, item in doc["paths"].items():
        for key in item:
            if key in HTTP_METHODS:
                out.add((key, normalise(path)))
    return out


def spec_fields(function):
    """The names in the `fields[]` array that `function` in spec.c checks
    the request's top-level keys against."""
    text = read(SPEC_C)
    start = re.search(r"\b%s\s*\([^)]*\)\s*\{" % re.escape(function), text)
    assert start, "%s not found in spec.c" % function
    arr = re.compile(r"fields\[\]\s*=\s*\{(.*?)\};", re.S).search(text, start.end())
    assert arr, "no fields[] array in %s" % function
    names = re.findall(r'"([^"]*)"', arr.group(1))
    assert names, "empty fields[] in %s" % function
    return set(names)


def resolve(doc, ref):
    assert ref.startswith("#/"), "external or malformed $ref: %s" % ref
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, "unresolved $ref: %s" % ref
        node = node[part]
    return node


def walk(node, where="#"):
    if isinstance(node, dict):
        for k, v in node.items():
            yield where, k, v
            yield from walk(v, where + "/" + k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, "%s/%d" % (where, i))


def schema(doc, name):
    s = doc["components"]["schemas"][name]
    while "$ref" in s:
        s = resolve(doc, s["$ref"])
    return s


def test_parses_as_openapi_303(doc):
    assert isinstance(doc, dict)
    assert doc["openapi"] == "3.0.3"
    assert doc["info"]["title"] and doc["info"]["version"]
    assert isinstance(doc["paths"], dict) and doc["paths"]


def test_every_router_route_is_documented(doc):
    missing = router_routes() - documented_routes(doc)
    assert not missing, "routes in router.c but not in openapi.json: %s" % sorted(missing)


def test_every_documented_route_exists(doc):
    extra = documented_routes(doc) - router_routes()
    assert not extra, "routes in openapi.json but not in router.c: %s" % sorted(extra)


def test_path_parameters_are_declared(doc):
    for path, item in doc["paths"].items():
        names = set(re.findall(r"\{([^}/]+)\}", path))
        for method, op in item.items():
            if method not in HTTP_METHODS:
                continue
            params = [resolve(doc, p["$ref"]) if "$ref" in p else p
                      for p in item.get("parameters", []) + op.get("parameters", [])]
            declared = {p["name"] for p in params if p["in"] == "path"}
            assert declared == names, "%s %s declares path params %s" % (method, path, declared)


def test_every_ref_resolves(doc):
    refs = [(where, v) for where, k, v in walk(doc) if k == "$ref"]
    assert refs
    for where, ref in refs:
        assert isinstance(ref, str), where
        resolve(doc, ref)


def test_no_extensions(doc):
    for where, k, _ in walk(doc):
        assert not k.startswith("x-") or where.endswith(("/properties", "/mapping", "/example")), \
            "extension %s at %s" % (k, where)


def test_auth_on_v1_and_metrics_not_on_healthz(doc):
    scheme = doc["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert doc["security"] == [{"bearerAuth": []}]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in HTTP_METHODS:
                continue
            # /metrics is per tenant, so it takes the key like /v1
            if path.startswith("/v1/") or path == "/metrics":
                assert "security" not in op, "%s %s overrides security" % (method, path)
                assert "401" in op["responses"], "%s %s lacks 401" % (method, path)
            else:
                assert op.get("security") == [], "%s %s must not need auth" % (method, path)


def test_error_schema(doc):
    err = schema(doc, "Error")
    assert err["required"] == ["error"]
    detail = err["properties"]["error"]
    if "$ref" in detail:
        detail = resolve(doc, detail["$ref"])
    assert set(detail["properties"]) == {"code", "message"}
    assert set(detail["properties"]["code"]["enum"]) == {
        "bad_request", "unauthorized", "not_found", "conflict", "payload_too_large",
        "quota_exceeded", "internal", "unsupported", "unavailable", "bad_gateway"}


def test_create_sandbox_fields_match_spec_c(doc):
    s = schema(doc, "CreateSandbox")
    assert s["additionalProperties"] is False
    assert set(s["properties"]) == spec_fields("parse_create_fields")


def test_create_sandbox_nested_fields_match_spec_c(doc):
    props = schema(doc, "CreateSandbox")["properties"]
    for field, function in (("resources", "parse_resources"), ("network", "parse_network")):
        sub = props[field]
        if "$ref" in sub:
            sub = resolve(doc, sub["$ref"])
        assert sub["additionalProperties"] is False
        assert set(sub["properties"]) == spec_fields(function), field


def test_exec_request_fields_match_spec_c(doc):
    s = schema(doc, "ExecRequest")
    assert s["additionalProperties"] is False
    assert set(s["properties"]) == spec_fields("parse_exec_fields")
    assert s["required"] == ["cmd"]
