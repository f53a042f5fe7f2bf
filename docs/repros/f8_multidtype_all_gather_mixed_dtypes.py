"""F8: inductor's all-gather bucketing in mode ``custom_ops_multidtype`` (a value
``torch._inductor.config.bucket_all_gathers_bucket_mode`` accepts) fails on a bucket that mixes
dtypes when a member's byte size is not a multiple of the widest member's element size (a float32
member of 29 elements beside a float64 one). Imports only torch. Run:
``python docs/repros/f8_multidtype_all_gather_mixed_dtypes.py``; prints ``REPRODUCED`` with the
error, or ``NOT REPRODUCED``.
"""

import torch
import torch.distributed as dist
from torch._inductor.fx_passes.bucketing import bucket_all_gather
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.distributed.fake_pg import FakeStore

c10d = torch.ops._c10d_functional
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
GROUP = dist.group.WORLD.group_name


def step(a: torch.Tensor, b: torch.Tensor):
    return (c10d.wait_tensor(c10d.all_gather_into_tensor(a, 2, GROUP)) * 2,
            c10d.wait_tensor(c10d.all_gather_into_tensor(b, 2, GROUP)) + 1)


inputs = (torch.randn(29), torch.randn(3, dtype=torch.float64))
graph = make_fx(step, tracing_mode="fake")(*inputs)
try:
    bucket_all_gather(graph, mode="custom_ops_multidtype")
    graph.recompile()
    graph(*inputs)
except Exception as exc:  # noqa: BLE001
    print(f"REPRODUCED: {type(exc).__name__}: {str(exc).splitlines()[0]}")
else:
    print("NOT REPRODUCED")
