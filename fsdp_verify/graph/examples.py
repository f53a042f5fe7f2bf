"""Built-in example graphs: a small FSDP-tagged MLP joint graph, as spec section 1.4 emits it."""

from __future__ import annotations

from fsdp_verify.graph.compose import Composer
from fsdp_verify.graph.spec import GraphSpec


def mlp_graph(*, layers: int = 2, width: int = 8, batch: int = 4, degree: int = 2, dtype: str = "float32",
              reduce_op: str = "avg", device: str = "cuda:0", overload: str = "") -> GraphSpec:
    """A ``layers``-deep MLP: forward gathers sunk before use with reshard frees, backward
    re-gathers with re-materialised views and backward frees, and a reduce-scatter tail."""
    c = Composer({"fsdp": tuple(range(degree))}, overload=overload)
    x = c.input("x", (batch, width), dtype)
    shard = width // degree
    for i in range(layers):
        c.param(f"layers.{i}.weight", (shard, width), state_idx=2 * i, dtype=dtype, device=device)
        c.param(f"layers.{i}.bias", (shard,), state_idx=2 * i + 1, dtype=dtype, device=device)
    acts = [x]
    for i in range(layers):
        _, w = c.all_gather(f"layers.{i}.weight")
        _, b = c.all_gather(f"layers.{i}.bias")
        wt = c.call("aten.t.default", w)
        h = c.call("aten.addmm.default", b, acts[-1], wt)
        c.free(w, fqn=f"layers.{i}.weight")
        c.free(b, fqn=f"layers.{i}.bias")
        acts.append(c.call("aten.relu.default", h))
    loss = c.call("aten.sum.default", acts[-1])
    grad = c.call("aten.ones_like.default", acts[-1], backward=True)
    grads: dict[str, str] = {}
    for i in reversed(range(layers)):
        grad = c.call("aten.mul.Tensor", grad, acts[i + 1], backward=True)
        grads[f"layers.{i}.weight"] = c.call("aten.mm.default", c.call("aten.t.default", grad, backward=True),
                                             acts[i], backward=True)
        grads[f"layers.{i}.bias"] = c.call("aten.sum.dim_IntList", grad, [0], backward=True)
        _, w_bw = c.all_gather(f"layers.{i}.weight", backward=True)
        grad = c.call("aten.mm.default", grad, w_bw, backward=True)
        c.free(w_bw, backward=True, fqn=f"layers.{i}.weight")
    outputs = [loss]
    for param in c.params:
        _, wait = c.reduce_scatter(grads[param.fqn], param.fqn, reduce_op=reduce_op)
        outputs.append(wait)
    state_fqns = [p.fqn for p in c.params]
    return c.finish(outputs, attrs={"state_fqns": state_fqns, "num_state_inputs": len(state_fqns),
                                    "state_is_param": [True] * len(state_fqns)})
