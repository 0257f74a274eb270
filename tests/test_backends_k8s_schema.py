"""Every emitted PyTorchJob is valid under the Kubeflow PyTorchJob CRD's own schema (a copy in
tests/data/kubeflow, source in its README), with unknown fields refused wherever the schema is
structural: the API server prunes such fields silently, or rejects them under strict field
validation (`kubectl apply --validate=strict`)."""
from __future__ import annotations

import copy
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

from backends_support import every_target_cases
from support.structural import strict

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates the manifests")
yaml = pytest.importorskip("yaml", reason="PyYAML reads the manifests")

SCHEMA = Path(__file__).resolve().parent / "data" / "kubeflow" / "pytorchjob-v1-openapi-schema.json"
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
OBJECT_META = {"name", "namespace", "labels", "annotations"}   # what parc may write at the top


@lru_cache(maxsize=1)
def validator():
    schema = strict(json.loads(SCHEMA.read_text()))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def errors(job: dict) -> list[str]:
    out = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(job)]
    # the root's metadata is ObjectMeta, which the CRD leaves to the API server
    out += [f"metadata: unknown field {k}" for k in job.get("metadata", {}) if k not in OBJECT_META]
    return out


def jobs():
    for spec, target, files in every_target_cases():
        if target != "kubernetes":
            continue
        docs = list(yaml.safe_load_all(next(f.text for f in files if f.path == "job.yaml")))
        yield spec, docs


def test_the_schema_copy_is_the_crds():
    s = json.loads(SCHEMA.read_text())
    assert s["type"] == "object" and set(s["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert s["properties"]["spec"]["required"] == ["pytorchReplicaSpecs"]


def test_strictness_refuses_unknown_and_misplaced_fields():
    """The check can fail: a misspelt field and a field one level too deep are errors."""
    spec, docs = next(jobs())
    job = next(d for d in docs if d["kind"] == "PyTorchJob")
    assert errors(job) == []
    bad = copy.deepcopy(job)
    vol = bad["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"][1]["emptyDir"]
    vol["sizeLimt"] = vol.pop("sizeLimit")
    assert any("sizeLimt" in e for e in errors(bad))
    bad = copy.deepcopy(job)
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["runPolicy"] = bad["spec"].pop("runPolicy")
    assert any("runPolicy" in e for e in errors(bad))
    bad = copy.deepcopy(job)
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["requests"][
        "memory"] = "lots"
    assert errors(bad)


def test_every_emitted_pytorchjob_is_valid_under_the_crd():
    n = 0
    for spec, docs in jobs():
        kinds = [d["kind"] for d in docs]
        assert kinds.count("PyTorchJob") == 1 and kinds[0] == "ConfigMap", (spec, kinds)
        job = docs[-1]
        assert job["apiVersion"] == "kubeflow.org/v1"
        assert errors(job) == [], (spec, errors(job))
        # every object and every Service the operator derives from the job's name is a DNS-1035 label
        name = job["metadata"]["name"]
        for role, r in job["spec"]["pytorchReplicaSpecs"].items():
            derived = f"{name}-{role.lower()}-{r['replicas'] - 1}"
            assert DNS_1035.fullmatch(derived) and len(derived) <= 63, (spec, derived)
        for d in docs:
            assert DNS_1035.fullmatch(d["metadata"]["name"]) and len(d["metadata"]["name"]) <= 63, spec
        n += 1
    assert n >= 10
