"""F1 (contract mismatch): after ``bucket_all_gather`` a member's result can be a view of the shared
bucket buffer. Harmless in the functional graphs inductor receives; fatal in an FSDP graph that
frees each member's storage after use (the free releases every member). Imports only torch. Run:
``python docs/repros/f1_members_share_the_bucket_storage.py``; prints ``REPRODUCED`` when two
members' results share one storage.
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
    return wa, wb


inputs = (torch.randn(1), torch.randn(1))
graph = make_fx(step, tracing_mode="fake")(*inputs)
bucket_all_gather(graph, mode="default")
graph.recompile()
wa, wb = graph(*inputs)
shared = wa.untyped_storage().data_ptr() == wb.untyped_storage().data_ptr()
print("REPRODUCED: both members view one bucket buffer" if shared else "NOT REPRODUCED: independent storage")
