"""F11: inductor's custom_ops all-gather bucketing and the FX graph cache: a warm start fails.

Run 1 compiles a model whose two parameters are all-gathered with
bucket_all_gathers_fx="all" and bucket_all_gathers_bucket_mode="custom_ops", FX graph cache on:
the bucketing pass registers torch.ops.bucketing._pre_bucket_all_gather when its module is
imported, and the compiled code calls it. Run 2, a fresh process on the same cache folder, hits
the cache, so the post-grad passes (and their import) never run: the loaded code cannot find the op.
Imports only torch. Exit 1: reproduced; 0: not.
"""
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._functional_collectives import all_gather_tensor_autograd


class Gathered(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(8, 8))
        self.w2 = nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        w1 = all_gather_tensor_autograd(self.w1, 0, dist.group.WORLD)
        w2 = all_gather_tensor_autograd(self.w2, 0, dist.group.WORLD)
        return (x @ w1 @ w2).relu()


def step() -> None:
    import torch._inductor.config as config
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    model = Gathered()
    with config.patch({"bucket_all_gathers_fx": "all", "bucket_all_gathers_bucket_mode": "custom_ops",
                       "fx_graph_cache": True}):
        out = torch.compile(model, backend="inductor", fullgraph=True)(torch.randn(4, 8))
        out.sum().backward()
    from torch._dynamo.utils import counters
    print("fx graph cache:", dict(counters["inductor"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:] == ["step"]:
        step()
        sys.exit(0)
    folder = tempfile.mkdtemp(prefix="inductor-cache-")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": folder}
    for run in (1, 2):
        done = subprocess.run([sys.executable, __file__, "step"], env=env, capture_output=True, text=True)
        print(f"run {run}: exit {done.returncode}", (done.stdout.strip().splitlines() or [""])[-1])
        if done.returncode:
            print((done.stderr.strip().splitlines() or [""])[-1])
            print("REPRODUCED" if run == 2 else "run 1 failed: not this bug")
            sys.exit(1 if run == 2 else 3)
    print("not reproduced: the warm run loaded the cache and ran")
    sys.exit(0)
