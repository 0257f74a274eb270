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
