"""Save a state_dict of CUDA tensors with torch.distributed.checkpoint through kvikio, load it
back into fresh tensors, compare, and print (one JSON document on stdout) which path kvikio
took and the throughput.

    eval "$(provisioner export env --node NODE)"   # KVIKIO_COMPAT_MODE, CUFILE_ENV_PATH_JSON, ...
    python3 run_example.py --size-mib 1024          # writes under $GDSFLEET_GDS_MOUNT

Under torchrun (WORLD_SIZE > 1) every rank saves the shared items and one private tensor
through a gloo process group (DCP's collectives carry only plans and metadata), so each rank
writes its own data file; rank 0 prints the document for all ranks.

    python3 -m torch.distributed.run --standalone --nproc-per-node 2 run_example.py

Exit 0 when every tensor and object came back equal, 1 when something differed, 2 when the
save or load raised (e.g. KVIKIO_COMPAT_MODE=OFF on a node without GDS: cuFile refuses).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvikio  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from dcp_layout import describe_path  # noqa: E402
from kvikio_dcp import KvikioStorageReader, KvikioStorageWriter, kvikio_state  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402


def make_state_dict(size_mib: int, rank: int = 0) -> dict[str, Any]:
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(1234)
    n = max(size_mib, 4) * (1 << 20) // 4 // 4  # four float32 tensors of size_mib/4 each
    sd: dict[str, Any] = {f"layer{i}.weight": torch.randn(n, generator=g, device=dev)
                          for i in range(4)}
    sd["embed.bf16"] = torch.randn(513, 97, generator=g, device=dev).to(torch.bfloat16)
    sd["odd.float64"] = torch.randn(1000, generator=g, device=dev, dtype=torch.float64)
    sd["mask.bool"] = torch.rand(777, generator=g, device=dev) > 0.5
    sd["ids.int64"] = torch.randint(0, 1 << 40, (333,), generator=g, device=dev)
    sd["scale.scalar"] = torch.tensor(3.25, device=dev)
    sd["cpu.buffer"] = torch.arange(4096, dtype=torch.int32)  # a CPU tensor, loaded on the CPU
    sd[f"rank{rank}.private"] = torch.full((1 << 20,), rank + 0.5, device=dev)  # one rank's
    sd["step"] = 42
    sd["name"] = "kvikio-dcp-example"
    return sd


def fresh_like(sd: dict[str, Any]) -> dict[str, Any]:
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None
            for k, v in sd.items()}


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    bad = []
    for k, v in a.items():
        w = b.get(k)
        if isinstance(v, torch.Tensor):
            if not isinstance(w, torch.Tensor) or w.device != v.device or w.dtype != v.dtype \
                    or not torch.equal(v, w):
                bad.append(k)
        elif v != w:
            bad.append(k)
    return bad


def _first_error(exc: BaseException) -> str:
    failures = getattr(exc, "failures", None)  # CheckpointException: {rank: exception}
    if isinstance(failures, dict) and failures:
        rank, cause = next(iter(failures.items()))
        if isinstance(cause, tuple) and cause:  # (exception, traceback summary)
            cause = cause[0]
        return f"{type(exc).__name__} on rank {rank}: {type(cause).__name__}: {cause}"
    return f"{type(exc).__name__}: {exc}"


def _gather(value: Any) -> list[Any]:
    if not dist.is_initialized():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="parent directory of the checkpoint (default "
                    "$GDSFLEET_GDS_MOUNT, else a temporary directory)")
    ap.add_argument("--size-mib", type=int, default=256, help="tensor bytes, MiB (default 256)")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint directory")
    args = ap.parse_args()
    rank, world = 0, int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    parent = args.dir or os.environ.get("GDSFLEET_GDS_MOUNT") or tempfile.gettempdir()
    made = [tempfile.mkdtemp(prefix="kvikio-dcp-", dir=parent) if rank == 0 else None]
    if world > 1:
        dist.broadcast_object_list(made, src=0)
    ckpt = Path(str(made[0]))
    out: dict[str, Any] = {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(), "world_size": world, "checkpoint": str(ckpt),
    }
    mine: dict[str, Any] = {"rank": rank}
    try:
        sd = make_state_dict(args.size_mib, rank)
        writer = KvikioStorageWriter(ckpt)
        torch.cuda.synchronize()
        _barrier()
        t0 = time.perf_counter()
        dcp.save(sd, checkpoint_id=ckpt, storage_writer=writer)
        t_save = time.perf_counter() - t0
        out["kvikio_after_save"] = kvikio_state()
        _barrier()
        dropped = []
        if rank == 0:
            for f in sorted(ckpt.glob("__*_data.kvikio")):
                kvikio.drop_file_page_cache(str(f))
                dropped.append(list(kvikio.get_page_cache_info(str(f))))
        out["page_cache_after_drop"] = dropped  # [pages cached, pages total] per data file
        _barrier()
        reader = KvikioStorageReader(ckpt)
        fresh = fresh_like(sd)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dcp.load(fresh, checkpoint_id=ckpt, storage_reader=reader)
        torch.cuda.synchronize()
        _barrier()
        t_load = time.perf_counter() - t0
        mine.update({"items": len(sd), "differs": compare(sd, fresh),
                     "bytes_written": writer.bytes_written, "bytes_read": reader.bytes_read})
        out.update({"save_s": round(t_save, 3), "load_s": round(t_load, 3)})
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - reported with the path
        # DCP wraps a rank's failure in CheckpointException, a BaseException: name the cause.
        mine["error"] = _first_error(exc)
    ranks = _gather(mine)
    errors = [r["error"] for r in ranks if "error" in r]
    if errors:
        out.update({"ok": False, "error": errors[0]})
        code = 2
    else:
        bad = sorted({k for r in ranks for k in r["differs"]})
        written = sum(r["bytes_written"] for r in ranks)
        read = sum(r["bytes_read"] for r in ranks)
        out.update({
            "ok": not bad, "differs": bad, "items": ranks[0]["items"],
            "bytes_written": written, "bytes_read": read,
            "save_gbps": round(written / out["save_s"] / 1e9, 3),
            "load_gbps": round(read / out["load_s"] / 1e9, 3),
            "files": {p.name: p.stat().st_size for p in sorted(ckpt.iterdir())},
        })
        code = 0 if not bad else 1
    if world > 1:
        out["per_rank"] = ranks
    state = out.get("kvikio_after_save") or kvikio_state()
    out.setdefault("kvikio_after_save", state)
    out["path_taken"] = describe_path(state, io_ok="error" not in out)
    _barrier()
    if rank == 0:
        if not args.keep:
            shutil.rmtree(ckpt, ignore_errors=True)
        json.dump(out, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    if dist.is_initialized():
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
