"""F7: inductor's reduce-scatter bucketing in mode ``custom_ops_multidtype`` fails on any graph
with two reduce-scatters, although ``torch._inductor.config.bucket_reduce_scatters_bucket_mode``
accepts that value. Imports only torch. Run: ``python docs/repros/f7_multidtype_reduce_scatter.py``;
it prints ``REPRODUCED`` with the error, or ``NOT REPRODUCED``.
"""

import torch
import torch.distributed as dist
from torch._inductor.fx_passes.bucketing import bucket_reduce_scatter
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.distributed.fake_pg import FakeStore

c10d = torch.ops._c10d_functional
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
GROUP = dist.group.WORLD.group_name


def step(a: torch.Tensor, b: torch.Tensor):
    ra = c10d.reduce_scatter_tensor(a, "sum", 2, GROUP)
    rb = c10d.reduce_scatter_tensor(b, "sum", 2, GROUP)
    return c10d.wait_tensor(ra) + 1, c10d.wait_tensor(rb) * 2


graph = make_fx(step, tracing_mode="fake")(torch.randn(8), torch.randn(8))
try:
    bucket_reduce_scatter(graph, mode="custom_ops_multidtype")
except Exception as exc:  # noqa: BLE001
    print(f"REPRODUCED: {type(exc).__name__}: {exc}")
else:
    print("NOT REPRODUCED")
