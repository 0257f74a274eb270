"""Checkpoints with torch.distributed.checkpoint: saved under one plan, loaded under another.

Parameter names are the same in every plan (layers keyed by global index), and every sharded
weight is a DTensor that knows its global shape, so DCP reshards on load: a checkpoint written
with tp = 2 loads with tp = 4, with dp·tp, with pipeline stages, or in one process. The step
count goes beside it in ``parc-run.json``. Optimizer state is not saved (SGD has none).

A checkpoint folder is data someone else may have written. DCP keeps its metadata as a pickle,
and unpickling runs whatever the pickle names; so parc reads ``.metadata`` with an unpickler that
admits only the metadata classes of the format (and the torch sizes, dtypes and layouts they
hold), admits tensor entries only (DCP reads other entries with a full unpickler), shard files
only inside the folder, and checks the names and shapes against this plan's model and the shard
files' sizes before any rank starts. Anything else is refused in one line.

Every file of the format in the folder (``.metadata``, the ``*.distcp`` shards, ``parc-run.json``)
must be a regular file of the folder itself, never a link: DCP opens the names it reads and
writes as they are, so a shard that links elsewhere would be read from, or overwritten at, a
path outside the folder. :func:`check_folder` refuses such a folder before any rank starts, for
loading and for saving alike, and parc's own step file is written without following a link.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import stat
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     set_model_state_dict)

from parc.runtime.options import CheckpointError  # noqa: F401 - re-exported

META = "parc-run.json"
METADATA = ".metadata"


_MD = "torch.distributed.checkpoint.metadata"
_ALLOWED = {
    (_MD, "Metadata"), (_MD, "TensorStorageMetadata"), (_MD, "TensorProperties"),
    (_MD, "ChunkStorageMetadata"), (_MD, "MetadataIndex"), (_MD, "StorageMeta"),
    (_MD, "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"), ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"), ("collections", "OrderedDict"),
}


class _Forbidden(pickle.UnpicklingError):
    """The pickle names something a checkpoint's metadata never holds."""


class _Unpickler(pickle.Unpickler):
    """Admits only the classes a DCP metadata file holds."""

    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _Forbidden(f"it names `{module}.{name}`, which checkpoint metadata never holds")

    def persistent_load(self, pid):
        raise _Forbidden("it holds a persistent reference, which checkpoint metadata never holds")


def read_metadata(path) -> object:
    """The metadata of the checkpoint in ``path``, read safely, or :class:`CheckpointError`."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, TensorStorageMetadata

    where = Path(path) / METADATA
    check_folder(path)
    try:
        data = where.read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read {where}: {e.strerror or e}") from None
    try:
        md = _Unpickler(io.BytesIO(data)).load()
    except _Forbidden as e:
        raise CheckpointError(f"{where} is refused: {e}; parc runs no code from a checkpoint") from None
    except Exception as e:  # noqa: BLE001 - any malformed pickle
        raise CheckpointError(f"{where} is not torch.distributed.checkpoint metadata "
                              f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'unreadable'})") from None
    if not isinstance(md, Metadata) or not isinstance(md.state_dict_metadata, dict) \
            or not isinstance(md.storage_data, dict):
        raise CheckpointError(f"{where} is not torch.distributed.checkpoint metadata "
                              f"(it holds {type(md).__name__})")
    for key, entry in md.state_dict_metadata.items():
        if not isinstance(key, str) or not isinstance(entry, TensorStorageMetadata):
            raise CheckpointError(f"{where} is refused: entry {str(key)[:80]!r} is not a tensor (parc's "
                                  "checkpoints hold tensors only, and DCP unpickles other entries in full)")
    for idx, info in md.storage_data.items():
        rel = getattr(info, "relative_path", None)
        if not isinstance(idx, MetadataIndex) or not isinstance(info, _StorageInfo) or not isinstance(rel, str) \
                or not rel or rel != os.path.basename(rel) or rel in (".", "..") or info.transform_descriptors:
            raise CheckpointError(f"{where} is refused: a storage entry points outside the folder's own shard "
                                  "files or asks for a transform")
    return md


class SafeReader(FileSystemReader):
    """DCP's file reader with the metadata read by :func:`read_metadata`."""

    def read_metadata(self, *args, **kwargs):
        from torch.distributed.checkpoint.metadata import StorageMeta

        md = read_metadata(self.path)
        if getattr(md, "storage_meta", None) is None:
            md.storage_meta = StorageMeta()
        md.storage_meta.load_id = self.load_id
        return md


def _ours(name: str) -> bool:
    """Whether DCP or parc reads or writes a file of this name in a checkpoint folder."""
    return name.startswith(METADATA) or name.endswith(".distcp") or name == META


def regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (not a link to one, nor a device or a FIFO)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def check_folder(path: str) -> None:
    """Refuse, in one line, a checkpoint folder where a file of the format is not a regular
    file of the folder itself (a link, a folder, a device): DCP would read it, or write through
    it, outside the folder."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return   # no folder yet: the save makes it
    for name in names:
        if _ours(name) and not regular(Path(path) / name):
            kind = "a link" if os.path.islink(Path(path) / name) else "not a regular file"
            raise CheckpointError(f"{path} is refused: {name} is {kind}; a checkpoint's files must be regular "
                                  "files inside its folder (DCP would read or overwrite what it points to)")


def exists(path: str) -> bool:
    return (Path(path) / METADATA).is_file()


def expected_shapes(cfg) -> dict:
    """``model.<name>`` -> shape of every tensor of the whole model (built on the meta device)."""
    from parc.runtime.model import Transformer

    with torch.device("meta"):
        model = Transformer(cfg)
    return {f"model.{k}": tuple(v.shape) for k, v in model.state_dict().items()}


def validate(path: str, cfg) -> None:
    """Refuse, in one line, a checkpoint folder this plan cannot load: unsafe or garbage metadata,
    another model's tensors, a missing or truncated shard, an unreadable step file."""
    md = read_metadata(path)
    want = expected_shapes(cfg)
    have = {k: tuple(v.size) for k, v in md.state_dict_metadata.items()}
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    if missing or extra:
        what = (f"it lacks {missing[0][6:]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                if missing else f"it holds {extra[0][6:]}" + (f" and {len(extra) - 1} more" if len(extra) > 1 else "")
                + " that this model does not have")
        raise CheckpointError(f"{path} holds another model's checkpoint: {what}")
    for k in sorted(want):
        if have[k] != want[k]:
            raise CheckpointError(f"{path} holds another model's checkpoint: {k[6:]} is "
                                  f"{list(have[k])} there and {list(want[k])} in this plan's model")
    need: dict[str, int] = {}
    for info in md.storage_data.values():
        need[info.relative_path] = max(need.get(info.relative_path, 0), int(info.offset) + int(info.length))
    for rel, size in sorted(need.items()):
        f = Path(path) / rel
        if not f.exists():
            raise CheckpointError(f"{path} is incomplete: its shard {rel} is missing")
        if not regular(f):
            check_folder(path)   # says which file is a link
        got = f.stat().st_size
        if got < size:
            raise CheckpointError(f"{path} is incomplete: its shard {rel} is truncated ({got} bytes; the "
                                  f"metadata needs {size})")
    saved_step(path)


def one_line(path: str, e: BaseException) -> str:
    """A load failure in one line (DCP's own errors carry every rank's traceback)."""
    text = str(e).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")), "")
    return f"cannot load the checkpoint in {path}: {first[:300] or type(e).__name__}"
def _state(rank) -> dict:
    out = {}
    for mod in rank.state_dict_modules():
        out.update(get_model_state_dict(mod, options=StateDictOptions(strict=False)))
    return out


def save(rank, path: str, step: int) -> dict:
    Path(path).mkdir(parents=True, exist_ok=True)
    state = _state(rank)
    dcp.save({"model": state}, checkpoint_id=path)
    info = {"path": str(path), "step": step, "tensors": _count(state)}
    if dist.get_rank() == 0:   # never through a link (check_folder refused one before the ranks started)
        fd = os.open(os.path.join(path, META), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                     0o644)
        with os.fdopen(fd, "w") as f:
            json.dump({"step": step, "world_size": dist.get_world_size()}, f)
    dist.barrier()
    return info


def load(rank, path: str) -> dict:
    state = _state(rank)
    try:
        dcp.load({"model": state}, checkpoint_id=path, storage_reader=SafeReader(path))
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - DCP wraps every rank's failure in one long message
        raise CheckpointError(one_line(path, e)) from None
    for mod in rank.state_dict_modules():
        names = {n for n, _ in mod.named_parameters()} | {n for n, _ in mod.named_buffers()}
        set_model_state_dict(mod, {k: v for k, v in state.items() if k in names},
                             options=StateDictOptions(strict=False))
    return {"path": str(path), "step": saved_step(path), "tensors": _count(state)}


def saved_step(path: str) -> int:
    """The step count saved beside a checkpoint (0 if unknown)."""
    meta = Path(path) / META
    if not meta.exists():
        return 0
    if not regular(meta):
        check_folder(path)
    try:
        step = json.loads(meta.read_text(encoding="utf-8")).get("step", 0)
    except (OSError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{meta} is not the step file parc writes ({type(e).__name__})") from None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{meta} is not the step file parc writes (step {step!r})")
    return step


def _count(state: dict) -> int:
    return len(state)
