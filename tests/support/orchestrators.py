"""What the judges of the serving orchestrators' manifests share (tests/test_dynamo_judge.py,
tests/test_kserve_judge.py): the manifests parc compiles for the examples, the test specs and a
module's own plans; and, imported by the judges from their own environment (no pytest there),
the CRD's schema as the API server applies it and the object's name checks."""
from __future__ import annotations

import re

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
OBJECT_META = {"name", "namespace", "labels", "annotations"}


def compiled(check_spec, target: str, path: str, plans) -> list[tuple[str, dict, str]]:
    """(name, plan as JSON, the manifest at ``path``) of every example and test spec parc compiles
    for ``target``, then of each (name, spec text) of ``plans``, which must check without errors."""
    import importlib
    import json

    from backends_support import accepted_cases

    build = importlib.import_module(f"parc.targets.{target}").build
    out = []
    for spec, t, files in accepted_cases():
        if t == target:
            by = {f.path: f.text for f in files}
            out.append((spec, json.loads(by["plan.json"]), by[path]))
    for name, text in plans:
        r = check_spec(text, (target,))
        assert not r.errors, (name, [(d.code, d.message) for d in r.errors])
        plan = {**r.plan.to_dict(), "world_size": r.plan.world_size}
        out.append((name, plan, next(f.text for f in build(r.plan) if f.path == path)))
    return out


def crd_validator(path: str, version: str):
    """The validator of the CRD at ``path``'s ``version`` as the API server applies it: unknown
    fields refused wherever the schema is structural (support.structural.strict)."""
    import jsonschema
    import yaml

    from support.structural import strict

    with open(path) as f:
        crd = yaml.safe_load(f)
    schema = strict(next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"])
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)


def name_errors(meta: dict) -> list[str]:
    """The object's name a DNS-1035 label of at most 63 characters, its namespace a DNS-1123 label."""
    out = []
    name = meta.get("name", "")
    if not (len(name) <= 63 and DNS_1035.fullmatch(name)):
        out.append(f"metadata.name {name!r}: not a DNS-1035 label")
    ns = meta.get("namespace")
    if ns is not None and not (len(ns) <= 63 and DNS_1123.fullmatch(ns)):
        out.append(f"metadata.namespace {ns!r}: not a DNS-1123 label")
    return out + [f"metadata: unknown field {k}" for k in meta if k not in OBJECT_META]
