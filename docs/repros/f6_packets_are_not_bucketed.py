"""F6 (contract mismatch, observation): all-gathers that call the op packet
(``torch.ops._c10d_functional.all_gather_into_tensor``, as the hyper_parallel FSDP pass emits them)
are left alone by ``bucket_all_gather``, which matches ``.default`` overloads only (what make_fx
produces). Imports only torch. Run: ``python docs/repros/f6_packets_are_not_bucketed.py``.
"""

import torch
import torch.distributed as dist
from torch import fx
from torch._inductor.fx_passes.bucketing import bucket_all_gather
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.testing._internal.distributed.fake_pg import FakeStore

c10d = torch.ops._c10d_functional
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
graph = fx.Graph()
a, b = graph.placeholder("a"), graph.placeholder("b")
waits = [graph.call_function(c10d.wait_tensor, (graph.call_function(
    c10d.all_gather_into_tensor, (x, 2, dist.group.WORLD.group_name)),)) for x in (a, b)]
graph.output(tuple(waits))
module = fx.GraphModule(torch.nn.Module(), graph)
mode = FakeTensorMode()
FakeTensorProp(module, mode).propagate(mode.from_tensor(torch.randn(2)), mode.from_tensor(torch.randn(2)))
before = len(module.graph.nodes)
bucket_all_gather(module, mode="default")
print("REPRODUCED: packet-form all-gathers left unbucketed" if len(module.graph.nodes) == before
      else "NOT REPRODUCED: the packets were bucketed")
