"""A ``torch.distributed.checkpoint`` StorageWriter and StorageReader whose tensor bytes go
through kvikio (``kvikio.CuFile``): GPUDirect Storage where the node has it, POSIX otherwise.

Layout of a checkpoint directory (``checkpoint_id``)::

    .metadata            DCP's Metadata, pickled; its storage_data maps each MetadataIndex to
                         {"file", "offset", "nbytes", "dtype", "shape"} or {"file", "offset",
                         "nbytes", "bytes": True}
    __<rank>_data.kvikio tensors of one rank, raw bytes, each at a 4 KiB-aligned offset,
                         written with CuFile.pwrite from GPU memory, read with CuFile.pread
    __<rank>_objects.bin non-tensor items (DCP's BYTE_IO: ints, strings), plain file I/O

Written against the StorageWriter/StorageReader interface of torch 2.4+ (reset,
set_up_storage_*, prepare_local_plan, prepare_global_plan, write_data/read_data, finish,
read_metadata, validate_checkpoint_id; ``torch/distributed/checkpoint/storage.py``). Tensors on
the CPU are copied to the current GPU first so that every byte takes kvikio's device path.

The environment decides kvikio's path: ``provisioner export env --node NODE`` prints it for a
verified node (KVIKIO_COMPAT_MODE=OFF where the direct path was proven, ON elsewhere).
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kvikio
import torch
from dcp_layout import aligned_offsets, mode_name, narrow_spec
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

METADATA = ".metadata"


def _done(value: Any) -> Future:
    fut: Future = Future()
    fut.set_result(value)
    return fut


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def _sync() -> None:
    torch.cuda.synchronize()


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous uint8 view of ``t``'s bytes on the GPU (any dtype, bf16 included)."""
    dev = _device()
    if t.device != dev:
        t = t.to(dev)
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


class KvikioStorageWriter(StorageWriter):
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self.path = Path(path) if path is not None else None
        self.bytes_written = 0

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.path = Path(checkpoint_id)
        self.bytes_written = 0

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if self.path is None:
            raise ValueError("give the checkpoint directory (path or checkpoint_id)")
        self.path.mkdir(parents=True, exist_ok=True)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # Each rank writes its own files: the coordinator hands out the name prefixes.
        return [dataclasses.replace(p, storage_data=f"__{i}_") for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        assert self.path is not None
        prefix = plan.storage_data or "__0_"
        data_name, obj_name = f"{prefix}data.kvikio", f"{prefix}objects.bin"
        tensors: list[tuple[Any, torch.Tensor, torch.Tensor]] = []
        objects: list[tuple[Any, bytes]] = []
        for item in plan.items:
            resolved = planner.resolve_data(item)
            if item.type == WriteItemType.BYTE_IO:
                assert isinstance(resolved, io.BytesIO)
                objects.append((item, resolved.getvalue()))
            else:
                t = resolved.detach()
                tensors.append((item, t, _as_bytes(t)))
        # kvikio's threads read GPU memory outside torch's stream order: finish the copies.
        _sync()
        offsets, _ = aligned_offsets([int(b.numel()) for _, _, b in tensors])
        results: list[WriteResult] = []
        with kvikio.CuFile(self.path / data_name, "w") as f:
            futures = [f.pwrite(b, int(b.numel()), off) for (_, _, b), off in
                       zip(tensors, offsets, strict=True) if b.numel()]
            for fut in futures:
                fut.get()
            os.fsync(f.fileno())
        for (item, t, b), off in zip(tensors, offsets, strict=True):
            info = {"file": data_name, "offset": off, "nbytes": int(b.numel()),
                    "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
            results.append(WriteResult(index=item.index, size_in_bytes=int(b.numel()),
                                       storage_data=info))
            self.bytes_written += int(b.numel())
        with open(self.path / obj_name, "wb") as fh:
            pos = 0
            for item, data in objects:
                fh.write(data)
                info = {"file": obj_name, "offset": pos, "nbytes": len(data), "bytes": True}
                results.append(WriteResult(index=item.index, size_in_bytes=len(data),
                                           storage_data=info))
                pos += len(data)
            fh.flush()
            os.fsync(fh.fileno())
        return _done(results)

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        assert self.path is not None
        metadata.storage_data = {r.index: r.storage_data for rank in results for r in rank}
        tmp = self.path / f"{METADATA}.tmp"
        with open(tmp, "wb") as fh:
            pickle.dump(metadata, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path / METADATA)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    def storage_meta(self) -> Any:
        return None


class KvikioStorageReader(StorageReader):
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self.path = Path(path) if path is not None else None
        self.storage_data: dict[MetadataIndex, dict[str, Any]] = {}
        self.bytes_read = 0

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.path = Path(checkpoint_id)
        self.storage_data = {}
        self.bytes_read = 0

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if self.path is None:
            raise ValueError("give the checkpoint directory (path or checkpoint_id)")
        with open(self.path / METADATA, "rb") as fh:
            # The example reads only checkpoints it wrote itself (DCP's own FileSystemReader
            # unpickles its .metadata the same way).
            return pickle.load(fh)  # noqa: S301

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        self.storage_data = dict(metadata.storage_data or {})

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        assert self.path is not None
        by_file: dict[str, list[Any]] = {}
        for item in plan.items:
            by_file.setdefault(self.storage_data[item.storage_index]["file"], []).append(item)
        device = _device()
        for name, items in by_file.items():
            if all(self.storage_data[i.storage_index].get("bytes") for i in items):
                self._read_objects(name, items, planner)
                continue
            with kvikio.CuFile(self.path / name, "r") as f:
                for item in items:
                    info = self.storage_data[item.storage_index]
                    stored = self._read_tensor(f, info, device)
                    for dim, start, length in narrow_spec(item.storage_offsets, item.lengths):
                        stored = stored.narrow(dim, start, length)
                    target = planner.resolve_tensor(item).detach()
                    if target.size() != stored.size():
                        raise ValueError(f"{item.storage_index}: stored part is "
                                         f"{tuple(stored.size())}, target {tuple(target.size())}")
                    target.copy_(stored)
                    planner.commit_tensor(item, target)
        _sync()
        return _done(None)

    def _read_tensor(self, f: Any, info: dict[str, Any], device: torch.device) -> torch.Tensor:
        nbytes = int(info["nbytes"])
        buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
        if nbytes:
            got = f.pread(buf, nbytes, int(info["offset"])).get()
            if got != nbytes:
                raise OSError(f"short read: {got} of {nbytes} bytes at {info['offset']}")
            self.bytes_read += nbytes
        return buf.view(getattr(torch, info["dtype"])).reshape(info["shape"])

    def _read_objects(self, name: str, items: Iterable[Any], planner: LoadPlanner) -> None:
        assert self.path is not None
        with open(self.path / name, "rb") as fh:
            for item in items:
                if item.type != LoadItemType.BYTE_IO:
                    raise ValueError(f"{item.storage_index}: a tensor stored as an object")
                info = self.storage_data[item.storage_index]
                fh.seek(int(info["offset"]))
                planner.load_bytes(item, io.BytesIO(fh.read(int(info["nbytes"]))))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))


def kvikio_state() -> dict[str, Any]:
    """What kvikio reports about the path it takes (kvikio 26.10 Python API)."""
    import kvikio.cufile_driver as drv
    import kvikio.defaults as defaults

    state: dict[str, Any] = {
        "kvikio": kvikio.__version__,
        "compat_mode": mode_name(defaults.get("compat_mode")),
        "compat_mode_preferred": bool(defaults.is_compat_mode_preferred()),
        "gds_threshold": defaults.get("gds_threshold"),
        "task_size": defaults.get("task_size"),
        "env": {k: os.environ.get(k) for k in ("KVIKIO_COMPAT_MODE", "CUFILE_ENV_PATH_JSON",
                                               "CUFILE_ALLOW_COMPAT_MODE", "GDSFLEET_GDS_MOUNT")},
    }
    try:
        state["libcufile"] = list(drv.libcufile_version())
    except Exception as exc:  # noqa: BLE001 - no libcufile is an answer, not a failure
        state["libcufile"] = f"{type(exc).__name__}: {exc}"
    if state["compat_mode"] == "ON":
        # cuFile is never opened in this mode; asking its properties would open the driver.
        state["allow_compat_mode"] = None
        state["is_gds_available"] = None
    else:
        try:
            state["is_gds_available"] = bool(drv.get("is_gds_available"))
            state["allow_compat_mode"] = bool(drv.get("allow_compat_mode"))
        except Exception as exc:  # noqa: BLE001
            state["cufile_error"] = f"{type(exc).__name__}: {exc}"
            state["allow_compat_mode"] = None
    return state
