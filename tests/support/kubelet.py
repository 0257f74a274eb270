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
