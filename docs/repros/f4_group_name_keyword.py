"""F4 (contract mismatch): ``bucket_all_gather`` crashes on an all-gather that passes ``group_name``
by keyword. make_fx/aot_autograd always pass it positionally, so inductor never receives this form.
Imports only torch. Run: ``python docs/repros/f4_group_name_keyword.py``.
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
waits = [graph.call_function(c10d.wait_tensor.default, (graph.call_function(
    c10d.all_gather_into_tensor.default, (x, 2), {"group_name": dist.group.WORLD.group_name}),)) for x in (a, b)]
graph.output(tuple(waits))
module = fx.GraphModule(torch.nn.Module(), graph)
mode = FakeTensorMode()
FakeTensorProp(module, mode).propagate(mode.from_tensor(torch.randn(2)), mode.from_tensor(torch.randn(2)))
try:
    bucket_all_gather(module, mode="default")
except Exception as exc:  # noqa: BLE001
    print(f"REPRODUCED: {type(exc).__name__}: {exc}")
else:
    print("NOT REPRODUCED")
