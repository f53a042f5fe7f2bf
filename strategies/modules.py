"""Realistic graphs: small ``nn.Module``s traced to one joint forward+backward FX graph, then
FSDP collectives, frees and tags inserted as the FSDP pass does (spec section 1.4).

Tracing uses ``make_fx`` over ``functional_call`` + ``torch.autograd.grad``; nodes after the loss
are the backward. Traces are cached per (model, dtype, batch): generation then only re-runs
the insertion pass.
"""

from __future__ import annotations

import functools
import math

import torch
from hypothesis import strategies as st
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.func import functional_call

from fsdp_verify.model.case import Case
from fsdp_verify.graph.builder import HEADER_KEY
from fsdp_verify.graph.importer import import_module
from fsdp_verify.graph.ops import C10D, _free_tensor_storage
from fsdp_verify.graph.spec import InputSpec, ParamSpec
from fsdp_verify.graph.values import DTYPE_NAMES
from fsdp_verify.reference.predicates import view_closure

WIDTH, VOCAB = 8, 16


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class EmbedNormHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        return self.head(self.norm(self.embed(tokens)))


class TinyBlock(nn.Module):
    """One pre-norm transformer block: single-head attention and an MLP."""

    def __init__(self):
        super().__init__()
        self.attn_norm = nn.LayerNorm(WIDTH)
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.mlp_norm = nn.LayerNorm(WIDTH)
        self.mlp = MLP()

    def forward(self, x):
        h = self.attn_norm(x)
        scores = torch.softmax(self.q(h) @ self.k(h).transpose(-1, -2) / math.sqrt(WIDTH), dim=-1)
        x = x + self.o(scores @ self.v(h))
        return x + self.mlp(self.mlp_norm(x))


class TiedLM(nn.Module):
    """Embedding and output head share one weight (tied parameters)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.block = TinyBlock()
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.block(self.embed(tokens)))


MODELS = {"mlp": MLP, "embed_norm_head": EmbedNormHead, "tiny_block": TinyBlock, "tied_lm": TiedLM}
TOKEN_MODELS = {"embed_norm_head", "tied_lm"}


@functools.lru_cache(maxsize=32)
def trace(kind: str, dtype: str, batch: int) -> tuple[fx.GraphModule, tuple[str, ...]]:
    """The joint graph of ``kind`` (inputs: the data, then every parameter), and parameter FQNs."""
    torch.manual_seed(0)
    model = MODELS[kind]().to(getattr(torch, dtype))
    names = tuple(name for name, _ in model.named_parameters())
    params = [p.detach().requires_grad_(True) for _, p in model.named_parameters()]
    if kind in TOKEN_MODELS:
        data = torch.randint(0, VOCAB, (batch, 3))
    else:
        data = torch.randn(batch, 3, WIDTH, dtype=getattr(torch, dtype))

    def joint(inputs, *weights):
        loss = functional_call(model, dict(zip(names, weights)), (inputs,)).sum()
        return (loss, *torch.autograd.grad(loss, weights))

    return make_fx(joint)(data, *params), names


def _order(graph: fx.Graph) -> dict[fx.Node, int]:
    return {node: index for index, node in enumerate(graph.nodes)}


def _tag(node: fx.Node, **meta) -> fx.Node:
    node.meta.update(meta)
    return node


def _gather_meta(fqn: str, index: int, placeholder: fx.Node, degree: int, shard: tuple, dtype, backward: bool) -> dict:
    meta = {"comm_type": "fsdp_all_gather_backward" if backward else "fsdp_all_gather", "comm_group": "fsdp",
            "param_node": placeholder.name, "param_name": fqn, "state_idx": index, "fsdp_degree": degree,
            "fsdp_bucket_spec": {"input_shape": shard, "output_shape": (shard[0] * degree, *shard[1:]),
                                 "dtype": dtype, "device": "cuda:0"}}
    if backward:
        meta["autograd_backward"] = True
    return meta


def _ops(overload: str) -> tuple:
    """(all_gather, reduce_scatter, wait) as packets (what the FSDP pass emits) or ``.default`` overloads."""
    ops = (C10D.all_gather_into_tensor, C10D.reduce_scatter_tensor, C10D.wait_tensor)
    return tuple(op.default for op in ops) if overload == "default" else ops


def _shard_param(graph: fx.Graph, placeholder: fx.Node, fqn: str, index: int, degree: int, loss: fx.Node,
                 overload: str = "") -> None:
    """Insert the forward gather + free and the backward re-gather + re-materialised views + free."""
    gather, _, wait_op = _ops(overload)
    full = tuple(placeholder.meta["val"].shape)
    shard = (full[0] // degree, *full[1:])
    dtype = placeholder.meta["val"].dtype
    order = _order(graph)
    last_forward = order[loss]
    users = sorted(placeholder.users, key=order.__getitem__)
    forward_users = [u for u in users if order[u] <= last_forward]
    if forward_users:
        with graph.inserting_before(forward_users[0]):
            launch = _tag(graph.call_function(gather, (placeholder, degree, "fsdp")),
                          **_gather_meta(fqn, index, placeholder, degree, shard, dtype, False))
            wait = _tag(graph.call_function(wait_op, (launch,)), wait_for=launch.name)
        for user in forward_users:
            user.replace_input_with(placeholder, wait)
    else:
        wait = None
    order = _order(graph)
    views, readers = view_closure(wait) if wait is not None else ([], [])
    forward_views = [v for v in views if order[v] <= last_forward]
    forward_readers = [r for r in readers if order[r] <= last_forward]
    chain = {wait, *forward_views} - {None}
    entries = sorted({u for n in chain for u in n.users if order[u] > last_forward}
                     | {u for u in placeholder.users if order[u] > last_forward}, key=order.__getitem__)
    if forward_readers:
        with graph.inserting_after(max(forward_readers, key=order.__getitem__)):
            graph.call_function(_free_tensor_storage, (wait,)).meta.update(comm_type="fsdp_reshard_free",
                                                                           param_name=fqn)
    if not entries:
        return
    with graph.inserting_before(entries[0]):
        launch_bw = _tag(graph.call_function(gather, (placeholder, degree, "fsdp")),
                         **_gather_meta(fqn, index, placeholder, degree, shard, dtype, True))
        wait_bw = _tag(graph.call_function(wait_op, (launch_bw,)), wait_for=launch_bw.name,
                       autograd_backward=True)
        clones = {wait: wait_bw} if wait is not None else {}
        for view in sorted(forward_views, key=order.__getitem__):
            clone = graph.node_copy(view, lambda n: clones.get(n, n))
            clone.meta["autograd_backward"] = True
            clones[view] = clone
    for entry in entries:
        for old, new in clones.items():
            entry.replace_input_with(old, new)
        entry.replace_input_with(placeholder, wait_bw)
    order = _order(graph)
    _, backward_readers = view_closure(wait_bw)
    with graph.inserting_after(max(backward_readers, key=order.__getitem__)):
        graph.call_function(_free_tensor_storage, (wait_bw,)).meta.update(
            comm_type="fsdp_reshard_free_backward", param_name=fqn, autograd_backward=True)


def fsdp_module_graph(kind: str, *, degree: int = 2, dtype: str = "float32", batch: int = 2,
                      overload: str = "") -> Case:
    """The FSDP-tagged joint graph of one of the MODELS, sharded over ``degree`` ranks."""
    _, scatter, wait_op = _ops(overload)
    traced, names = trace(kind, dtype, batch)
    graph = fx.Graph()
    output = graph.graph_copy(traced.graph, {})
    graph.output(output)
    module = fx.GraphModule(torch.nn.Module(), graph)
    placeholders = list(graph.find_nodes(op="placeholder"))
    out_node = next(iter(graph.find_nodes(op="output")))
    loss, grads = out_node.args[0][0], list(out_node.args[0][1:])
    order = _order(graph)
    for node in graph.nodes:
        if node.op == "call_function" and order[node] > order[loss]:
            node.meta["autograd_backward"] = True
    data, weights = placeholders[0], placeholders[1:]
    data._rename("tokens" if kind in TOKEN_MODELS else "x")
    params, inputs = [], []
    for index, (fqn, placeholder) in enumerate(zip(names, weights)):
        placeholder._rename("p_" + fqn.replace(".", "_"))
        full = tuple(placeholder.meta["val"].shape)
        if not full or full[0] % degree:
            inputs.append(InputSpec(placeholder.name, full, DTYPE_NAMES[placeholder.meta["val"].dtype]))
            continue
        placeholder.meta.update(param_name=fqn, state_idx=index, fsdp_degree=degree, is_param=True,
                                fsdp_sharded=True)
        _shard_param(graph, placeholder, fqn, index, degree, loss, overload)
        params.append(ParamSpec(fqn, placeholder.name, (full[0] // degree, *full[1:]),
                                DTYPE_NAMES[placeholder.meta["val"].dtype], "cuda:0", index, "fsdp"))
        with graph.inserting_before(out_node):
            grad = grads[index]
            spec = {"input_shape": full, "output_shape": (full[0] // degree, *full[1:]),
                    "dtype": placeholder.meta["val"].dtype, "device": "cuda:0"}
            launch = _tag(graph.call_function(scatter, (grad, "avg", degree, "fsdp")),
                          comm_type="fsdp_reduce_scatter", comm_group="fsdp", param_name=fqn, state_idx=index,
                          fsdp_degree=degree, fsdp_bucket_spec=spec, autograd_backward=True)
            wait = _tag(graph.call_function(wait_op, (launch,)), wait_for=launch.name,
                        param_name=fqn, state_idx=index, autograd_backward=True)
            grads[index] = wait
    out_node.args = ((loss, *grads),)
    data_val = data.meta["val"]
    inputs.insert(0, InputSpec(data.name, tuple(data_val.shape), DTYPE_NAMES[data_val.dtype],
                               VOCAB if kind in TOKEN_MODELS else 0))
    graph.lint()
    module.recompile()
    module.meta[HEADER_KEY] = {"groups": {"fsdp": (tuple(range(degree)),)}, "params": params, "inputs": inputs,
                               "attrs": {"state_fqns": list(names), "num_state_inputs": len(names),
                                         "state_is_param": [True] * len(names), "model": kind},
                               "version": 1}
    return Case(import_module(module), label=f"module:{kind}")


@st.composite
def graphs_from_modules(draw, kinds: tuple[str, ...] = tuple(MODELS)) -> Case:
    """A real small model's FSDP joint graph: the realistic source of cases."""
    kind = draw(st.sampled_from(kinds))
    degree = draw(st.sampled_from((2, 4, 8)))
    dtype = draw(st.sampled_from(("float32", "float64", "bfloat16")))
    case = fsdp_module_graph(kind, degree=degree, dtype=dtype, batch=draw(st.integers(1, 2)),
                             overload=draw(st.sampled_from(("", "default"))))
    return Case(case.graph, seed=draw(st.integers(0, 2**16)), label=case.label)
