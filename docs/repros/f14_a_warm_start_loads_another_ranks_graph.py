"""F14: a warm start loads another rank's compiled graph when DTensor shards are uneven.

Four gloo ranks on one host share inductor's cache folder, as local ranks do by default
(``/tmp/torchinductor_<user>``). Each compiles a SimpleFSDP-style model (DTensor parameters
sharded on dim 0, gathered with ``redistribute(Replicate())`` at each use): Linear(8, 3), ReLU,
LayerNorm(3), so rank 3 holds no row of any parameter and its graph (which pads each shard) differs
from the others'. As written no bucketing or other option is set; ``--bucketed`` turns on
inductor's all-gather and reduce-scatter bucketing (``bucket_all_gathers_fx`` and
``bucket_reduce_scatters_fx`` = "all").

Run 1 compiles cold and saves to the cache; run 2, fresh processes on the same folder, loads it.
The AOTAutograd cache key of a DTensor input is ``DTensor._stable_hash_for_caching``: the spec's
mesh, placements and global shape, never the local shard's shape, so all four ranks compute one key
and a warm rank may load a graph compiled for another rank's local shapes. Rank 3 then fails
(``setStorage: ... out of bounds for storage of size 0``) or runs kernels sized for one row on none.
With ``--bucketed`` it can be silent: rank 3 runs a graph compiled for another rank's one-row
shards on its empty ones (the graph's input check, ``assert_size_stride``, lets an empty tensor pass
as any size), the bucket's copy kernel reads past them and rank 3 sends what it read: in some runs
every rank computes wrong outputs and gradients and no rank fails, in others rank 3 segfaults.

``--device-fix`` first applies the change of pytorch#188401 (the fix of pytorch#188390: the key
also hashes the local tensor's device). On CPU every rank's device is ``cpu``, so it changes
nothing here. ``--shape-fix`` adds the local shard's shape and stride to the key: then each rank
loads its own graph.

``--hsdp``: the same defect with even shards. A 2x2 mesh (HSDP: ``(Replicate(), Shard(0))``),
Linear(8, 4) and LayerNorm(4), two rows of each parameter on every rank, so every rank's shapes
agree and ``--shape-fix`` changes nothing; but each rank's graph names its own two process groups,
and the one key makes every warm rank load one rank's graph: the ranks outside that rank's groups
fail ("Could not resolve the process group registered under the name ..."). ``--coordinate-fix``
adds the local shape, stride and the rank's coordinate in the mesh: then each rank loads its own.

Each warm rank's output and local gradients are compared bit for bit with its cold run.
Imports only torch. Exit 1: reproduced (a warm rank failed or differs); 0: not.
"""
import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

WORLD = 4


class SimpleFSDPModel(nn.Module):
    """Linear(8, width), ReLU, then LayerNorm(width), every parameter a DTensor sharded on dim 0 of
    the mesh's last dimension (replicated over the first on a 2-D mesh)."""

    def __init__(self, mesh, width):
        super().__init__()
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        gen = torch.Generator().manual_seed(0)  # the same full values on every rank
        self.width, self.dims = width, mesh.ndim
        where = [Replicate()] * (mesh.ndim - 1) + [Shard(0)]
        shapes = {"linear_weight": (width, 8), "linear_bias": (width,), "norm_weight": (width,), "norm_bias": (width,)}
        self.params = nn.ParameterDict({
            name: nn.Parameter(distribute_tensor(torch.randn(shape, generator=gen), mesh, where))
            for name, shape in shapes.items()})

    def full(self, name):
        from torch.distributed.tensor import Partial, Replicate
        return self.params[name].redistribute(placements=[Replicate()] * self.dims).to_local(
            grad_placements=[Partial()] * self.dims)

    def forward(self, x):
        x = torch.relu(F.linear(x, self.full("linear_weight"), self.full("linear_bias")))
        return F.layer_norm(x, (self.width,), self.full("norm_weight"), self.full("norm_bias"))


def patch_key(fix):
    """Apply a change to the DTensor cache key: the device (pytorch#188401) or the local shape too."""
    from torch.distributed.tensor import DTensor

    def stable_hash(self):
        local = self._local_tensor
        data = self._spec._stable_hash() + str(self.requires_grad) + str(local.device)
        if fix in ("shape", "coordinate"):
            data += str(tuple(local.shape)) + str(tuple(local.stride()))
        if fix == "coordinate":
            data += str(self._spec.mesh.get_coordinate())
        return hashlib.blake2b(data.encode(), digest_size=16).hexdigest()
    DTensor._stable_hash_for_caching = stable_hash


def rank_main(rank, port, out, fix, bucketed, hsdp):
    from torch.distributed.device_mesh import init_device_mesh
    from torch._dynamo.utils import counters
    if fix:
        patch_key(fix)
    store = dist.TCPStore("127.0.0.1", port, WORLD, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=30))
    if hsdp:
        mesh = init_device_mesh("cpu", (2, WORLD // 2), mesh_dim_names=("dp_replicate", "dp_shard"))
    model = SimpleFSDPModel(mesh, 4) if hsdp else SimpleFSDPModel(init_device_mesh("cpu", (WORLD,)), 3)
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(rank + 1))
    import torch._inductor.config as config
    options = {"bucket_all_gathers_fx": "all", "bucket_reduce_scatters_fx": "all"} if bucketed else {}
    with config.patch(options):
        y = torch.compile(model, backend="inductor", fullgraph=True)(x)
    y.sum().backward()
    found = {"output": y.detach().flatten().tolist()}
    found.update({f"grad {name}": p.grad.to_local().flatten().tolist() for name, p in model.params.items()})
    found["cache"] = {k: v for k, v in counters["aot_autograd"].items() if "cache" in k}
    with open(out, "w") as f:
        json.dump(found, f)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(folder, tag, fix, bucketed, hsdp):
    """One step on every rank, in fresh processes, on the shared cache folder."""
    port = free_port()
    outs = [os.path.join(folder, f"{tag}{rank}.json") for rank in range(WORLD)]
    errs = [open(os.path.join(folder, f"{tag}{rank}.err"), "w") for rank in range(WORLD)]
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(folder, "cache")}
    procs = [subprocess.Popen([sys.executable, __file__, "rank", str(rank), str(port), outs[rank], fix, bucketed, hsdp],
                              env=env,
                              stdout=subprocess.DEVNULL, stderr=errs[rank]) for rank in range(WORLD)]
    results = []
    for rank, proc in enumerate(procs):
        try:
            proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errs[rank].close()
        lines = open(errs[rank].name).read().strip().splitlines()
        why = [line for line in lines if "Error" in line]
        doc = json.load(open(outs[rank])) if os.path.exists(outs[rank]) else None
        results.append((proc.returncode, doc, (why or lines or [""])[-1][:240]))
    return results


def main():
    flags = set(sys.argv[1:])
    fixes = {"--device-fix": "device", "--shape-fix": "shape", "--coordinate-fix": "coordinate"}
    unknown = flags - {*fixes, "--bucketed", "--hsdp"}
    if unknown or len(flags & set(fixes)) > 1:
        sys.exit(f"usage: {sys.argv[0]} [--device-fix | --shape-fix | --coordinate-fix] [--bucketed] [--hsdp]")
    fix = next((fixes[flag] for flag in fixes if flag in flags), "")
    bucketed = "bucketed" if "--bucketed" in flags else ""
    hsdp = "hsdp" if "--hsdp" in flags else ""
    folder = tempfile.mkdtemp(prefix="f14-")
    print(f"cache key: {'as installed' if not fix else f'with the {fix} fix'}; "
          f"{'all-gathers and reduce-scatters bucketed' if bucketed else 'no bucketing'}; "
          f"{'a 2x2 HSDP mesh, even shards' if hsdp else 'a 1-D mesh of 4, uneven shards'}; each rank's stderr in {folder}")
    cold, warm = run(folder, "cold", fix, bucketed, hsdp), run(folder, "warm", fix, bucketed, hsdp)
    bad = False
    for rank, ((cold_rc, cold_doc, cold_why), (warm_rc, warm_doc, warm_why)) in enumerate(zip(cold, warm)):
        if cold_rc or cold_doc is None:
            print(f"rank {rank}: the cold run failed ({cold_why}): not this bug")
            sys.exit(3)
        if warm_rc or warm_doc is None:
            print(f"rank {rank}: cold {cold_doc['cache']}; warm run failed (exit {warm_rc}): {warm_why}")
            bad = True
            continue
        differs = [name for name in cold_doc if name != "cache" and cold_doc[name] != warm_doc.get(name)]
        print(f"rank {rank}: warm {warm_doc['cache']}; differs from its cold run: {differs or 'nothing'}")
        bad = bad or bool(differs)
    print("REPRODUCED" if bad else "not reproduced")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank"]:
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7])
        sys.exit(0)
    main()
