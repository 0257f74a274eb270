"""``parc import`` of the serving orchestrators' objects (a Dynamo DynamoGraphDeployment, a KServe
LLMInferenceService, a Ray Serve LLM application) and of a Kubeflow TrainJob with the training
runtime it refers to: compile then import gives back the same plan (generated plans, and the
DeepSeek-V3 prefill/decode example with its pools), the runtime is read from the same file or
another, a runtime no file holds is a placeholder with P041, and hostile objects stay data."""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.import_specs import SPEC

ROOT = Path(__file__).resolve().parent.parent
MODEL = 'model = "meta-llama/Llama-3.1-8B-Instruct"\n'
MAIN = {"dynamo": "dgd.yaml", "kserve": "llmisvc.yaml", "rayserve": "serve.yaml"}

# the engine's spec of test_import_roundtrip, with the orchestrator's block after the engine's
ORCHESTRATOR = """
target {orchestrator} {{
{orchestrator_keys}}}
"""


def _plan(path: Path, target: str):
    from parc.api import check_file

    r = check_file(str(path), [target])
    assert r.plan is not None and not r.errors, [(d.code, d.message) for d in r.errors]
    return r.plan


def compiled_then_imported(text: str, target: str, cluster: bool = True):
    """(the plan, the plan of its compiled object imported back, the import)."""
    from parc import targets
    from parc.importer import Options, import_files

    tmp = Path(tempfile.mkdtemp(prefix="parc-orch-"))
    spec = tmp / "plan.par"
    spec.write_text(text, encoding="utf-8")
    plan = _plan(spec, target)
    main = next(f for f in targets.get(target).build(plan) if f.path == MAIN[target])
    (tmp / main.path).write_text(main.text, encoding="utf-8")
    imp = import_files([str(tmp / main.path)], Options(cluster=str(spec) if cluster else None))
    assert imp.target == target, imp.text
    back = tmp / "back.par"
    back.write_text(imp.text, encoding="utf-8")
    return plan, _plan(back, target), imp


@st.composite
def plans(draw):
    orchestrator, engine = draw(st.sampled_from([("dynamo", "vllm"), ("dynamo", "sglang"), ("kserve", "vllm"),
                                                 ("rayserve", "vllm")]))
    nodes = draw(st.sampled_from([1, 2])) if orchestrator != "kserve" else 1
    # meshes that fill the cluster (dp, pp, tp); SGLang's dp is attention dp, left out here
    shapes = {1: [(1, 1, 8), (1, 2, 4), (2, 1, 4), (2, 2, 2), (4, 1, 2), (8, 1, 1)],
              2: [(1, 2, 8), (2, 1, 8), (2, 2, 4)]}[nodes]
    dp, pp, tp = draw(st.sampled_from([s for s in shapes if engine == "vllm" or s[0] == 1]))
    mesh = "".join(f"  {k} = {v}\n" for k, v in (("dp", dp), ("pp", pp), ("tp", tp)) if v > 1 or k == "tp")
    # a Dynamo vLLM worker over several nodes runs over Ray, which the operator starts
    engine_keys = "  executor = ray\n" if (orchestrator, engine, nodes) == ("dynamo", "vllm", 2) else ""
    text = SPEC.format(nodes=nodes, mesh=mesh, ctx=draw(st.sampled_from([4096, 8192, 32768])),
                       seqs=draw(st.sampled_from([16, 64, 256])), engine=engine)
    # a DynamoGraphDeployment in either API version the target writes (v1beta1 its default)
    api = draw(st.sampled_from(["", "  api_version = v1alpha1\n"])) if orchestrator == "dynamo" else ""
    text = text.replace(MODEL, MODEL + engine_keys) + ORCHESTRATOR.format(
        orchestrator=orchestrator, orchestrator_keys=f"  engine = {engine}\n{api}" if orchestrator == "dynamo" else "")
    return orchestrator, text


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_compile_then_import_gives_back_the_same_plan(case):
    orchestrator, text = case
    plan, again, imp = compiled_then_imported(text, orchestrator)
    for k in ("dp", "pp", "tp", "cp", "ep"):
        assert getattr(again.mesh, k) == getattr(plan.mesh, k), (k, imp.text)
    assert again.serve.max_model_len == plan.serve.max_model_len, imp.text
    assert again.serve.max_num_seqs == plan.serve.max_num_seqs, imp.text
    assert again.model.layers == plan.model.layers and again.model.hidden == plan.model.hidden
    assert f"target {orchestrator} " in imp.text
    # the same object again: the API version, the pods and their GPUs
    assert again.targets[orchestrator].settings.get("api_version") == plan.targets[orchestrator].settings.get(
        "api_version"), imp.text
    assert (again.cluster.nodes, again.cluster.gpus_per_node) == (plan.cluster.nodes, plan.cluster.gpus_per_node)


def _pd(orchestrator: str) -> str:
    """The DeepSeek-V3 prefill/decode example for ``orchestrator`` (its engine named)."""
    text = (ROOT / "examples" / "deepseek-v3-pd.par").read_text(encoding="utf-8")
    if orchestrator == "dynamo-sglang":
        return text.replace("target sglang { }", 'target sglang { model = "deepseek-ai/DeepSeek-V3" }\n'
                                                 "target dynamo { engine = sglang }")
    text = text.replace("target sglang { }\n", "")
    if orchestrator == "dynamo-vllm":     # the decode engine spans two nodes: over Ray
        return text.replace('model = "deepseek-ai/DeepSeek-V3"\n', 'model = "deepseek-ai/DeepSeek-V3"\n  executor = ray\n') \
            + "\ntarget dynamo { engine = vllm }\n"
    return text


@pytest.mark.parametrize("orchestrator", ["dynamo-vllm", "dynamo-sglang", "rayserve", "kserve"])
def test_the_prefill_decode_example_is_imported_back_as_its_pools(orchestrator):
    """The DeepSeek-V3 P/D example: two prefill instances of tp 8 (ep 8), one decode engine of
    dp 2 · tp 8 (ep 16); the imported spec has the same pools and KV transfer, and checks; the
    object's pods say the cluster's 4 nodes of 8 GPUs."""
    target = orchestrator.split("-")[0]
    plan, again, imp = compiled_then_imported(_pd(orchestrator), target)
    assert len(plan.pools) == 2 and [p.name for p in again.pools] == [p.name for p in plan.pools], imp.text
    for a, b in zip(plan.pools, again.pools):
        assert b.instances == a.instances, (a.name, imp.text)
        for k in ("dp", "pp", "tp", "ep"):
            assert getattr(b.mesh, k) == getattr(a.mesh, k), (a.name, k, imp.text)
    assert again.serve.kv_transfer == plan.serve.kv_transfer
    said = " ".join(imp.report.notes)
    assert "the launch says nodes = 4" in said and "the launch says gpus_per_node = 8" in said, said


def _parc_import(tmp_path, files: dict[str, str], *args: str):
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    names = [n for n in files if "/" not in n]
    return subprocess.run([sys.executable, "-m", "parc", "import", *names, *args], capture_output=True, text=True,
                          cwd=tmp_path)


TRAINJOB = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: llama
spec:
  runtimeRef:
    name: torch-llama
  trainer:
    numNodes: {nodes}
"""

RUNTIME = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-llama
spec:
  mlPolicy:
    numNodes: 2
    torch:
      numProcPerNode: 8
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
                      command: ["torchrun", "--max-restarts", "3", "train.py", "--steps", "100"]
"""


@pytest.mark.parametrize("layout", ["same file", "two files"])
def test_a_trainjob_reads_the_command_nodes_and_processes_of_its_runtime(tmp_path, layout):
    """The TrainJob names no command: the runtime's container gives it, the runtime's mlPolicy
    the processes a node, the TrainJob's numNodes wins over the runtime's."""
    job = TRAINJOB.format(nodes=4)
    files = {"job.yaml": job + "---\n" + RUNTIME} if layout == "same file" else {"job.yaml": job, "runtime.yaml": RUNTIME}
    r = _parc_import(tmp_path, files)
    assert r.returncode == 0, r.stderr
    assert re.search(r"nodes\s+= 4\s+# job.yaml numNodes: 4", r.stdout), r.stdout
    assert re.search(r"gpus_per_node = 8\s+# numProcPerNode: 8", r.stdout), r.stdout
    assert 'entrypoint   = "train.py"' in r.stdout and 'args         = ["--steps", "100"]' in r.stdout, r.stdout
    assert "max_restarts = 3" in r.stdout and 'runtime      = "torch-llama"' in r.stdout, r.stdout
    assert "P041" not in r.stderr


def test_the_runtimes_node_count_is_read_where_the_trainjob_gives_none(tmp_path):
    job = TRAINJOB.replace("  trainer:\n    numNodes: {nodes}\n", "")
    r = _parc_import(tmp_path, {"job.yaml": job, "runtime.yaml": RUNTIME})
    assert r.returncode == 0, r.stderr
    assert re.search(r"nodes\s+= 2\s+# ClusterTrainingRuntime torch-llama \(runtime.yaml\) mlPolicy.numNodes: 2",
                     r.stdout), r.stdout


def test_a_runtime_no_file_holds_is_a_placeholder_and_p041(tmp_path):
    """Never a guessed script: the entrypoint is unknown(...), check names it (P040), and the
    import says why (P041) and what to give."""
    r = _parc_import(tmp_path, {"job.yaml": TRAINJOB.format(nodes=4)})
    assert r.returncode == 0, r.stderr
    assert 'entrypoint = unknown("the command of ClusterTrainingRuntime torch-llama, which no file given holds")' \
        in r.stdout, r.stdout
    assert "P041 warning" in r.stderr and "give the runtime's file" in r.stderr
    spec = tmp_path / "imported.par"
    spec.write_text(r.stdout, encoding="utf-8")
    c = subprocess.run([sys.executable, "-m", "parc", "check", str(spec), "--target", "trainjob"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert c.returncode == 1 and "P040" in c.stdout and "entrypoint" in c.stdout


def test_a_plain_torchrun_outside_a_trainjob_is_still_refused(tmp_path):
    r = _parc_import(tmp_path, {"run.sh": "torchrun --nproc_per_node 8 train.py\n"})
    assert r.returncode == 2 and "Python code it runs" in r.stderr


RAY = """applications:
  - name: app
    import_path: ray.serve.llm:build_openai_app
    args:
      llm_configs:
        - {config}
"""


def test_an_llm_config_outside_the_configs_folder_is_not_read(tmp_path):
    """A config file beside serve.yaml is read; one outside its folder never is (P042)."""
    (tmp_path / "secret.yaml").write_text("model_loading_config: {model_id: m}\nengine_kwargs: {tensor_parallel_size: 8}\n")
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "ok.yaml").write_text("model_loading_config: {model_id: meta-llama/Llama-3.1-8B-Instruct}\n"
                                   "engine_kwargs: {tensor_parallel_size: 2}\n")
    (inner / "serve.yaml").write_text(RAY.format(config="ok.yaml") + "        - ../secret.yaml\n")
    r = subprocess.run([sys.executable, "-m", "parc", "import", "serve.yaml"], capture_output=True, text=True, cwd=inner)
    assert r.returncode == 0 and "tp = 2" in r.stdout and "tp = 8" not in r.stdout, r.stderr
    assert "P042 warning" in r.stderr and "outside the config's folder" in r.stderr, r.stderr


DYNAMO = """apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata:
  name: {name}
spec:
  backendFramework: vllm
  services:
    Frontend:
      componentType: frontend
      extraPodSpec:
        mainContainer:
          command: [python3, -m, dynamo.frontend]
    VllmWorker:
      componentType: worker
      replicas: {replicas}
      resources:
        limits:
          gpu: "2"
      extraPodSpec:
        mainContainer:
          command: [python3]
          args: [-m, dynamo.vllm, --model, meta-llama/Llama-3.1-8B-Instruct, --tensor-parallel-size, "2",
                 --served-model-name, "x; rm -rf ~", --chat-template, "$(touch pwned)",
                 "--max-model-len=8192 --tensor-parallel-size=64"]
"""

KSERVE = """apiVersion: serving.kserve.io/v1alpha2
kind: LLMInferenceService
metadata:
  name: m
spec:
  model:
    uri: hf://meta-llama/Llama-3.1-8B-Instruct
    name: meta-llama/Llama-3.1-8B-Instruct
  replicas: {replicas}
  template:
    containers:
    - name: main
      env:
      - name: VLLM_ADDITIONAL_ARGS
        value: "--tensor-parallel-size 2 --served-model-name \\"$(touch pwned)\\" '--max-num-seqs=1\\nmesh {{ tp = 99 }}'"
      resources:
        limits:
          nvidia.com/gpu: "2"
"""


@pytest.mark.parametrize("name,text", [
    ("dgd.yaml", DYNAMO.format(name="ok", replicas=1)),
    ("dgd.yaml", DYNAMO.format(name='"a\\x1b[31mb\\nmesh { tp = 99 }"', replicas=1)),
    ("dgd.yaml", DYNAMO.format(name="ok", replicas=10 ** 12)),
    ("llmisvc.yaml", KSERVE.format(replicas='"3; rm -rf ~"')),
])
def test_hostile_objects_stay_data(tmp_path, name, text):
    """Option-shaped values stay one value, a shell line in the container is read and never run,
    control characters and newlines never become spec syntax, and a count that is none is 1 (P043)."""
    r = _parc_import(tmp_path, {name: text})
    assert r.returncode == 0, r.stderr
    from parc.language import fmt

    assert fmt.format_text(r.stdout) == r.stdout
    mesh = re.search(r"(?ms)^mesh \{.*?^\}", r.stdout).group(0)
    assert re.search(r"tp = 2\b", mesh) and "99" not in mesh and "64" not in mesh, r.stdout
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "~").exists()
    if "10 ** 12" in text or "000000000000" in text or '"3; rm' in text:
        assert "P043 warning" in r.stderr and "dp" not in mesh, r.stderr


BOMB = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
BOMB += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]


@pytest.mark.parametrize("body", [
    ("applications:\n  - name: app\n    import_path: ray.serve.llm:build_openai_app\n    args:\n      llm_configs:\n"
    "        - model_loading_config: {model_id: meta-llama/Llama-3.1-8B-Instruct}\n"
    "          engine_kwargs: {tensor_parallel_size: 2, hf_overrides: *a8, served_model_name: *a8}\n"
    "          placement_group_config: {bundles: *a8}\n"),
    ("kind: DynamoGraphDeployment\nspec:\n  services:\n    W:\n      componentType: worker\n      envs: *a8\n"
    "      replicas: *a8\n      extraPodSpec:\n        mainContainer:\n          command: [python3]\n"
    "          args: [-m, dynamo.vllm, --model, m, --tensor-parallel-size, '2']\n"),
])
def test_yaml_aliases_that_expand_exponentially_are_not_expanded(tmp_path, body):
    import time

    t = time.perf_counter()
    r = _parc_import(tmp_path, {"x.yaml": "\n".join(BOMB) + "\n" + body})
    assert time.perf_counter() - t < 30
    assert r.returncode == 0 and "tp = 2" in r.stdout, r.stderr
    assert len(r.stdout) < 20_000


def test_an_older_dynamo_role_switch_is_read_as_the_pool_it_names(tmp_path):
    """dynamo.vllm's --is-prefill-worker (Dynamo before --disaggregation-mode) names the prefill
    pool, is no vLLM option, and stderr says parc writes the newer spelling."""
    worker = ("    {name}:\n      componentType: worker\n      replicas: {n}\n      resources: {{limits: {{gpu: '1'}}}}\n"
              "      extraPodSpec:\n        mainContainer:\n          command: [python3]\n"
              "          args: [-m, dynamo.vllm, --model, meta-llama/Llama-3.1-8B-Instruct, {role}--kv-transfer-config,"
              " '{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}}']\n")
    text = ("apiVersion: nvidia.com/v1alpha1\nkind: DynamoGraphDeployment\nmetadata: {name: pd}\nspec:\n  services:\n"
            + worker.format(name="VllmPrefillWorker", n=2, role="--is-prefill-worker, ")
            + worker.format(name="VllmDecodeWorker", n=1, role=""))
    r = _parc_import(tmp_path, {"dgd.yaml": text})
    assert r.returncode == 0, r.stderr
    assert re.search(r"prefill \{\n\s+instances = 2", r.stdout) and re.search(r"decode \{\n\s+instances = 1", r.stdout), r.stdout
    assert "is-prefill-worker" not in r.stdout and "older Dynamo's spelling" in r.stderr


PUBLISHED = ROOT / "tests" / "data"
AGG_PLAN = ROOT / "tests" / "wild" / "dynamo-vllm-agg-qwen3-0.6b" / "plan.par"
CLUSTER = """cluster "pods" {{
  nodes         = {nodes}
  gpus_per_node = 1
  gpu           = h100_sxm
  intra_node    = nvlink(450GB/s)
  inter_node    = infiniband(400Gb/s)
}}
"""
# (the published P/D object, its target, the pods it runs, the --model it needs (no preset), its
# pools, and the differences between it and what parc compiles from its import, with reasons)
PUBLISHED_PD = [
    ("dynamo/published/vllm-disagg.yaml", "dynamo", 2, AGG_PLAN, [("prefill", 1), ("decode", 1)], {
        # the spec's kv_transfer is both pools': parc writes the connector on the decode worker too,
        # where Dynamo's template leaves it to dynamo.vllm
        "decode/vllm.kv_transfer_config"}),
    ("kserve/published/pd-qwen2-7b-gpu.yaml", "kserve", 3, None, [("prefill", 2), ("decode", 1)], set()),
]


@pytest.mark.parametrize("path,target,pods,model,pools,differ", PUBLISHED_PD, ids=[c[0] for c in PUBLISHED_PD])
def test_a_published_prefill_decode_object_round_trips(tmp_path, path, target, pods, model, pools, differ):
    """Dynamo's own vLLM P/D template (v1beta1 components of type prefill and decode), KServe's P/D
    sample: imported as two pools, checked, compiled, and compared with the original by the
    corpus's readers: only the differences listed, each with its reason."""
    from support import wild, wild_yaml

    from parc import targets
    from parc.api import check_file
    from parc.importer import Options, import_files

    text = wild.original_text(PUBLISHED / path)
    (tmp_path / "object.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "cluster.par").write_text(CLUSTER.format(nodes=pods), encoding="utf-8")
    imp = import_files([str(tmp_path / "object.yaml")],
                       Options(model=str(model) if model else None, cluster=str(tmp_path / "cluster.par")))
    (tmp_path / "back.par").write_text(imp.text, encoding="utf-8")
    r = check_file(str(tmp_path / "back.par"), [target])
    assert r.plan is not None and not r.errors, [(d.code, d.message) for d in r.errors]
    assert [(p.name, p.instances) for p in r.plan.pools] == pools, imp.text
    assert f"the launch says nodes = {pods}" in " ".join(imp.report.notes)
    original = wild_yaml.FORMATS[target](text, tmp_path / "original")
    emitted = wild.emitted_launches(target, targets.get(target).build(r.plan), tmp_path / "emitted")
    found = wild.compare(original, emitted)
    assert {d["key"] for d in found} <= differ, found


def test_a_runtime_without_a_command_leaves_the_images_entrypoint_unknown(tmp_path):
    """Kubeflow's torch-distributed runtime (tests/data/trainjob) names no command: a TrainJob
    without one runs the image's own, which the files do not say (P041, never a guessed script)."""
    runtime = (ROOT / "tests" / "data" / "trainjob" / "torch_distributed.yaml").read_text(encoding="utf-8")
    job = TRAINJOB.format(nodes=2).replace("torch-llama", "torch-distributed")
    r = _parc_import(tmp_path, {"job.yaml": job, "runtime.yaml": runtime})
    assert r.returncode == 0, r.stderr
    assert 'entrypoint = unknown("the command of the image pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime' in r.stdout
    assert "P041 warning" in r.stderr and "set `entrypoint` to the program the image runs" in r.stderr, r.stderr
    assert re.search(r'image\s+= "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"', r.stdout), r.stdout


def test_a_dynamo_workers_requests_and_shared_memory_come_back(tmp_path):
    """cpu, memory and shm_size of `target dynamo`, compiled into the worker's requests and
    sharedMemory, are read back as the same keys; a request in another unit is left out, and said."""
    text = (ROOT / "examples" / "llama3-70b-serve.par").read_text(encoding="utf-8").replace(
        'import "clusters/', f'import "{ROOT}/examples/clusters/')
    text += "target dynamo {\n  cpu      = 16\n  memory   = 64GiB\n  shm_size = 8GiB\n}\n"
    plan, again, imp = compiled_then_imported(text, "dynamo")
    for k in ("cpu", "memory", "shm_size"):
        assert again.targets["dynamo"].settings[k] == plan.targets["dynamo"].settings[k], (k, imp.text)
    odd = DYNAMO.format(name="ok", replicas=1).replace("      resources:\n        limits:\n",
                                                       "      resources:\n        requests: {cpu: 500m}\n"
                                                       "        limits:\n")
    r = _parc_import(tmp_path, {"dgd.yaml": odd})
    assert r.returncode == 0 and "cpu" not in r.stdout.split("target dynamo")[1], r.stdout
    assert "requests cpu: '500m' is not read" in r.stderr, r.stderr


def test_an_autoscaled_ray_serve_deployment_is_read_as_the_replicas_it_starts_with(tmp_path):
    config = ("model_loading_config: {model_id: meta-llama/Llama-3.1-8B-Instruct}\n"
              "engine_kwargs: {tensor_parallel_size: 2}\n"
              "deployment_config: {autoscaling_config: {min_replicas: 1, initial_replicas: 3, max_replicas: 8}}\n")
    r = _parc_import(tmp_path, {"serve.yaml": RAY.format(config="llm.yaml"), "llm.yaml": config})
    assert r.returncode == 0, r.stderr
    assert re.search(r"dp = 3\s+# serve.yaml deployment_config.num_replicas: 3", r.stdout), r.stdout
    assert "autoscaled deployment, read as the 3 replica(s) it starts with (initial_replicas)" in r.stderr, r.stderr
