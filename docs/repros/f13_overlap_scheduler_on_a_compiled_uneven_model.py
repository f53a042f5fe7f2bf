"""F13 on a real compile: the overlap scheduler orders all-gathers by rank when shards are uneven.

A SimpleFSDP-style model (parameters are DTensors sharded on dim 0 over 4 gloo ranks, gathered
with ``redistribute(Replicate())`` at each use, gradients ``Partial()``): Linear(8, 3), ReLU,
LayerNorm(3). Every parameter has 3 rows on 4 ranks, so rank 3 holds none and pads one row before
each gather, as DTensor does. Each rank compiles the model with inductor's overlap scheduler
(``aten_distributed_optimizations.enable_overlap_scheduling``, analytical estimators, its FSDP
pre-bucketing off, nothing else bucketed) and runs one forward and backward step. Each rank
compiles into a cache folder of its own, so no cached graph decides anything.

The scheduler must make the same decisions on every rank (its own comment says so), but it aligns
only its runtime estimates across ranks and skips even that when both estimators are analytical
("same shapes = same estimates"). The short rank's pad is compute the scheduler can overlap with
another gather, so that rank issues its gathers in another order and the step hangs.

The script prints the collectives each rank's graphs issue in the order the scheduler left them
(each named by the graph input it moves and that input's local shape), then whether the step
finished. Imports only torch (the estimators ask for a GPU's memory bandwidth: on a CPU-only
machine it stands in an H100's figure).
Exit 1: reproduced (the ranks issue gathers in different orders, or the step hangs or aborts);
0: not reproduced.
"""
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

WORLD = 4
STEP_TIMEOUT = 30  # seconds a rank waits on its peers before gloo gives up
CONFIG = {
    "aten_distributed_optimizations.enable_overlap_scheduling": True,
    "aten_distributed_optimizations.collective_estimator": "analytical",
    "aten_distributed_optimizations.compute_estimator": "analytical",
    "aten_distributed_optimizations.pre_bucketing_fsdp_collectives": False,
}
WAIT = torch.ops._c10d_functional.wait_tensor.default


class SimpleFSDPModel(nn.Module):
    """Linear(8, 3), ReLU, then LayerNorm(3), every parameter a DTensor sharded on dim 0."""

    def __init__(self, mesh):
        super().__init__()
        from torch.distributed.tensor import Shard, distribute_tensor
        gen = torch.Generator().manual_seed(0)  # the same full values on every rank
        shapes = {"linear_weight": (3, 8), "linear_bias": (3,), "norm_weight": (3,), "norm_bias": (3,)}
        self.params = nn.ParameterDict({
            name: nn.Parameter(distribute_tensor(torch.randn(shape, generator=gen), mesh, [Shard(0)]))
            for name, shape in shapes.items()})

    def full(self, name):
        from torch.distributed.tensor import Partial, Replicate
        return self.params[name].redistribute(placements=[Replicate()]).to_local(grad_placements=[Partial()])

    def forward(self, x):
        x = torch.relu(F.linear(x, self.full("linear_weight"), self.full("linear_bias")))
        return F.layer_norm(x, (3,), self.full("norm_weight"), self.full("norm_bias"))


def collectives_in_order(gm):
    """The graph's collective launches in order, each as "kind of <placeholder>": with overlap deps
    inserted, the scheduler wraps an op in a ``control_deps`` call whose subgraph holds it."""
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target, inputs = node.target, [a for a in node.args if isinstance(a, torch.fx.Node)]
        if target is torch.ops.higher_order.control_deps:
            inner = [n for n in getattr(gm, node.args[1].target).graph.nodes if n.op == "call_function"]
            target, inputs = inner[0].target, list(node.args[2:])
        if isinstance(target, torch._ops.OpOverload) and target.namespace == "_c10d_functional" \
                and target is not WAIT:
            source = _placeholder(inputs[0])
            found.append(f"{target.__name__.split('.')[0]} of {source.name} {tuple(source.meta['val'].shape)}")
    return found


def _placeholder(node):
    """The node a collective's input comes from (a placeholder, through pads and control deps)."""
    while node.op != "placeholder":
        inputs = [a for a in node.args if isinstance(a, torch.fx.Node)]
        if node.target is torch.ops.higher_order.control_deps:
            inputs = inputs[2:] if len(inputs) > 2 else inputs[1:]
        if not inputs:
            return node
        node = inputs[0]
    return node


def gathers_after_scheduling(record, note):
    """Wrap the scheduler's entry point so each graph it schedules appends its collectives' order
    (written at once: a rank that hangs or aborts later still leaves it)."""
    from torch._inductor.fx_passes import overlap_scheduling
    original = overlap_scheduling.schedule_overlap_bucketing_from_inductor_configs

    def wrapped(gm, *args, **kwargs):
        result = original(gm, *args, **kwargs)
        record.append(collectives_in_order(result if isinstance(result, torch.fx.GraphModule) else gm))
        note(False)
        return result
    overlap_scheduling.schedule_overlap_bucketing_from_inductor_configs = wrapped


def get_gpu_dram_gbps_on_cpu():
    """The analytical estimators ask for GPU memory bandwidth; a CPU-only run stands one in."""
    import torch._inductor.utils as inductor_utils
    import torch.utils._runtime_estimation as runtime_estimation
    for holder in (inductor_utils, runtime_estimation):
        holder.get_gpu_dram_gbps = lambda: 3350  # an H100's, GB/s


def rank_main(rank, port, out):
    import torch._inductor.config as config
    from torch.distributed.device_mesh import init_device_mesh
    store = dist.TCPStore("127.0.0.1", port, WORLD, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=STEP_TIMEOUT))
    mesh = init_device_mesh("cpu", (WORLD,))
    record, local_rows = [], {}

    def note(finished):
        with open(out, "w") as f:
            json.dump({"local_rows": local_rows, "gathers": record, "finished": finished}, f)
    gathers_after_scheduling(record, note)
    if not torch.cuda.is_available():
        get_gpu_dram_gbps_on_cpu()
    model = SimpleFSDPModel(mesh)
    local_rows.update({name: p.to_local().shape[0] for name, p in model.params.items()})
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(rank + 1))
    with config.patch(CONFIG):
        torch.compile(model, backend="inductor", fullgraph=True)(x).sum().backward()
    dist.barrier()
    note(True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    port, folder = free_port(), tempfile.mkdtemp(prefix="f13-")
    outs = [os.path.join(folder, f"rank{rank}.json") for rank in range(WORLD)]
    errs = [open(os.path.join(folder, f"rank{rank}.err"), "w") for rank in range(WORLD)]
    # Each rank compiles cold into its own cache folder: nothing an earlier run cached decides.
    procs = [subprocess.Popen([sys.executable, "-X", "faulthandler", __file__, "rank", str(rank), str(port), outs[rank]],
                              env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(folder, f"cache{rank}")},
                              stdout=subprocess.DEVNULL, stderr=errs[rank]) for rank in range(WORLD)]
    deadline = time.monotonic() + 300
    for proc in procs:
        try:
            proc.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    orders, finished = [], []
    for rank, proc in enumerate(procs):
        errs[rank].close()
        doc = json.load(open(outs[rank])) if os.path.exists(outs[rank]) else {}
        lines = open(errs[rank].name).read().strip().splitlines()
        why = [line for line in lines if "what()" in line or "Error" in line]
        print(f"rank {rank}: exit {proc.returncode}; local rows {doc.get('local_rows')}")
        for index, collectives in enumerate(doc.get("gathers", [])):
            print(f"  graph {index}, collectives in the order the scheduler left: {collectives}")
        if proc.returncode:
            print(f"  {(why or lines or [''])[-1][:240]}")
        orders.append(doc.get("gathers"))
        finished.append(proc.returncode == 0 and doc.get("finished", False))
    differ = any(order != orders[0] for order in orders)
    print(f"each rank's stderr: {folder}/rankN.err")
    print("the ranks' collective orders differ:", differ, "; every rank finished the step:", all(finished))
    if differ or not all(finished):
        print("REPRODUCED")
        sys.exit(1)
    print("not reproduced")


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank"]:
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        sys.exit(0)
    main()
