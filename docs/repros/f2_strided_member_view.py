"""F2: after ``bucket_all_gather``, a member whose original consumer is ``aten.view(wait, [-1])``
receives a strided column block of the bucket buffer, on which that view is invalid: the rewritten
post-grad graph is no longer a valid aten program. Imports only torch. Run:
``python docs/repros/f2_strided_member_view.py``; prints ``REPRODUCED`` with the error or
``NOT REPRODUCED``. Whether inductor's lowering would mask it in a full compile is not shown here.
"""

import torch
import torch.distributed as dist
from torch._inductor.fx_passes.bucketing import bucket_all_gather
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.distributed.fake_pg import FakeStore

c10d = torch.ops._c10d_functional
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
GROUP = dist.group.WORLD.group_name


def step(a: torch.Tensor, b: torch.Tensor):
    wa = c10d.wait_tensor(c10d.all_gather_into_tensor(a, 4, GROUP))
    wb = c10d.wait_tensor(c10d.all_gather_into_tensor(b, 4, GROUP))
    return wa * 2, wb.view(-1) + 1


# shapes of corpus/found/c7b4d2d170e8ca759d92.json: a (1,) shard and a (1, 1, 2) shard on 4 ranks
inputs = (torch.randn(1), torch.randn(1, 1, 2))
graph = make_fx(step, tracing_mode="fake")(*inputs)
bucket_all_gather(graph, mode="default")
graph.recompile()
try:
    graph(*inputs)  # the fake group's collectives run; only shapes and strides matter here
except RuntimeError as exc:
    print(f"REPRODUCED: {exc}")
else:
    print("NOT REPRODUCED: the bucketed graph runs")
