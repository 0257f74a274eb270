"""What the kubelet does to a container's command before it runs it, for the judges that run the
commands of parc's Kubernetes manifests (imported from their own environments: no pytest here)."""
from __future__ import annotations


def expand(text, env):
    """The kubelet's $(VAR) substitution (third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            if text[i + 1] == "(":
                j = text.find(")", i + 2)
                if j != -1:
                    name = text[i + 2:j]
                    out.append(env[name] if name in env else text[i:j + 1])
                    i = j + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


# The Kubernetes release whose API schemas judge the built-in objects (kubernetes-validate's).
K8S_VERSION = "1.37.0"


def builtin_errors(obj, what):
    """kubernetes-validate's strict verdict on a built-in object (a ConfigMap, a Service, a pod
    template): each error with where it is, or none. Needs the judges' environment."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as x:
        return [f"{what}: {x.message} at {'/'.join(map(str, x.path))}"]
    return []


def recorded(argv, env, tmp, programs):
    """Run ``argv`` (a container's command after the kubelet's substitution) with each of
    ``programs`` replaced by a recorder of its argv: the exit status, the end of stderr, and per
    program the argv of each of its calls in order."""
    import os
    import subprocess

    rec, binp = os.path.join(tmp, "rec"), os.path.join(tmp, "bin")
    os.makedirs(rec, exist_ok=True)
    os.makedirs(binp, exist_ok=True)
    for f in os.listdir(rec):
        os.unlink(os.path.join(rec, f))
    for name in programs:   # each call writes its argv, NUL-separated, to <name>.<n>
        p = os.path.join(binp, name)
        with open(p, "w") as f:
            f.write(f'#!/bin/sh\nn=$(ls "$REC" | grep -c "^{name}\\.")\nprintf \'%s\\0\' "$@" > "$REC/{name}.$n"\n')
        os.chmod(p, 0o755)
    r = subprocess.run(argv, env={**env, "PATH": binp + ":/usr/bin:/bin", "REC": rec}, capture_output=True,
                       text=True, timeout=60)
    runs = {}
    for f in sorted(os.listdir(rec), key=lambda f: (f.split(".")[0], int(f.split(".")[1]))):
        with open(os.path.join(rec, f), "rb") as fh:
            runs.setdefault(f.split(".")[0], []).append([a.decode() for a in fh.read().split(b"\0")[:-1]])
    return {"returncode": r.returncode, "stderr": r.stderr[-2000:], "runs": runs}
