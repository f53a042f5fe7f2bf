"""Blueprints: the few structural choices a generated graph is made of, rendered deterministically.

Hypothesis draws a Blueprint (counts, shapes, dtypes, view kinds, flags), never individual
nodes, so generation is fast and shrinking acts on meaningful structure: fewer blocks, fewer
parameters, smaller shapes, one group, two ranks. ``render`` turns it into a GraphSpec shaped
like the output of the FSDP pass (spec section 1.4).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from fsdp_verify.graph.compose import Composer
from fsdp_verify.graph.spec import GraphSpec
from fsdp_verify.graph.values import dtype_from_name

VIEW_KINDS = ("none", "flat", "t", "slice", "split", "expand", "chain", "pair", "index")
# How a parameter's RS layout-preparation chain is tagged (spec 1.7): its own, owned by another
# bucket id, through an op a chain may not hold, read by a node outside the chain, with a source
# tagged forward explicitly (no chain), or with a source tagged backward after an untagged link.
PREP_KINDS = ("own", "foreign_owner", "other_op", "shared", "forward_source", "backward_source")
# The running activation and gradient are clamped to [-BOUND, BOUND] after every step, so no
# product or sum grows geometrically: with inputs of magnitude <= 1 (execute.inputs), every value
# stays finite in every float dtype and the numerics oracle judges every output element.
BOUND = 8.0
DTYPES = ("float32", "float64", "float16", "bfloat16")
# How an all-gather source is laid out: the shard itself, or a copy with its first two dims'
# strides swapped (same shape and values, non-contiguous), as a shard on dim 1 gives. A rewriter
# that packs a source's storage instead of its elements is right on every contiguous source.
LAYOUTS = ("contiguous", "column_major")
# What a low-precision all-gather moves (a cast of the parameter before its gather): half and
# single precision as mixed precision does, float8 as float8 training does, int8 as quantised
# weights do, uint8 as packed 4-bit weights do (255 fits bf16's 8 bits, not int8's range). A bucket
# whose members move different dtypes must keep each member's dtype.
WIRES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2", "int8", "uint8")
# Wires nothing computes in: the gathered tensor is cast back to the parameter's dtype after the
# wait, before any view (the post-all-gather step of float8 and quantised all-gathers). int32 (4-bit
# weights packed eight to a word) is no wire of the mix: a mutation draws it beside a half-precision
# one, where only float64 holds both.
STORAGE_ONLY = frozenset({"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "int8", "uint8",
                          "int32"})


@dataclass(frozen=True)
class ParamDraw:
    """One parameter: shard shape, dtype, how consumers view it and how its gradient travels."""

    shard_shape: tuple[int, ...] = (2, 4)
    dtype: str = "float32"
    view: str = "flat"
    regather: bool = True
    reduce_op: str = "avg"
    expert: bool = False
    own_scope: bool = True  # an expert parameter lives in an ``experts`` submodule (else beside the dense ones)
    # An expert parameter sharded over the mesh's other axis of the same size: the strided subgroups
    # (ranks s, s+k, ...) where the others use the contiguous ones, as torchtitan shards experts over
    # ``dp_shard_mod_ep``. Two groups of one size with different ranks: a pass that tells groups
    # apart by their size fuses launches across them.
    strided_group: bool = False
    layout: str = "contiguous"  # or "column_major": the all-gather source is a non-contiguous copy (LAYOUTS)
    wire: str = ""  # a dtype of WIRES: every gather of the parameter moves a cast of it (low precision)
    # The cast is multiplied by a 0-dim float32 factor of the parameter (its amax) before the gather,
    # as a learned or computed scalar gain is: torch keeps the cast's dtype (a 0-dim tensor does not
    # widen a dimensioned one of its kind), so a dtype walk must follow torch's promotion rules.
    scaled: bool = False

    @property
    def frozen(self) -> bool:
        """A parameter stored in a dtype nothing computes in (a float8 or int8 weight) gets no
        gradient: it is gathered as it is and cast to float32 at each use."""
        return self.dtype in STORAGE_ONLY


@dataclass(frozen=True)
class Blueprint:
    """A whole graph's structure; every field shrinks toward the simplest graph."""

    blocks: tuple[tuple[ParamDraw, ...], ...] = ((ParamDraw(), ParamDraw()),)
    degree: int = 2
    expert_degree: int = 0
    reshard_after_forward: bool = True
    overload: str = ""
    device: str = "cuda:0"
    prep_chains: bool = False
    prep: str = "own"  # how the last parameter's prep chain is tagged (PREP_KINDS); the others own theirs
    prep_in_halves: bool = False  # own chains in spec 4.3's shape: the gradient's halves reshaped, concatenated
    batch: int = 4
    block_names: tuple[str, ...] = ()  # module FQNs of the blocks (default blocks.0, blocks.1, ...)

    def block(self, index: int) -> str:
        """The module FQN of block ``index``."""
        return self.block_names[index] if self.block_names else f"blocks.{index}"

    def params(self) -> list[tuple[str, ParamDraw]]:
        """(fqn, draw) for every parameter, in state order."""
        out = []
        for b, block in enumerate(self.blocks):
            for j, draw in enumerate(block):
                scope = f"{self.block(b)}.experts" if draw.expert and draw.own_scope else self.block(b)
                out.append((f"{scope}.w{j}", draw))
        return out


def _groups(bp: Blueprint) -> dict:
    groups = {"fsdp": tuple(range(bp.degree))}
    if bp.expert_degree:
        e = bp.expert_degree
        groups["fsdp_expert"] = tuple(tuple(range(s, s + e)) for s in range(0, bp.degree, e))
        if any(draw.expert and draw.strided_group for block in bp.blocks for draw in block):
            stride = bp.degree // e
            groups[STRIDED_GROUP] = tuple(tuple(range(s, bp.degree, stride)) for s in range(stride))
    return groups


STRIDED_GROUP = "fsdp_expert_strided"


def _group_of(draw: ParamDraw) -> str:
    if not draw.expert:
        return "fsdp"
    return STRIDED_GROUP if draw.strided_group else "fsdp_expert"


def _view_chain(c: Composer, tensor: str, kind: str, backward: bool, packets: bool = False) -> str:
    """The consumer's view of a gathered parameter (spec section 1.4: view chains, getitem); with
    ``packets`` the flat view calls the op packet, as the FSDP pass's targets do."""
    shape = c.shape(tensor)
    half = max(1, shape[0] // 2)
    if kind == "none":
        return tensor
    if kind == "flat":
        return c.call("aten.view" if packets else "aten.view.default", tensor, [-1], backward=backward)
    if kind == "t":
        if len(shape) <= 2:
            return c.call("aten.t.default", tensor, backward=backward)
        return c.call("aten.transpose.int", tensor, 0, 1, backward=backward)
    if kind == "slice":
        return c.call("aten.slice.Tensor", tensor, 0, 0, half, backward=backward)
    if kind == "split":
        parts = c.call("aten.split.Tensor", tensor, half, 0, backward=backward)
        return c.call("operator.getitem", parts, 0, backward=backward)
    if kind == "expand":
        unsq = c.call("aten.unsqueeze.default", tensor, 0, backward=backward)
        return c.call("aten.expand.default", unsq, [2, *shape], backward=backward)
    if kind == "chain":
        flat = c.call("aten.view.default", tensor, [-1], backward=backward)
        return c.call("aten.reshape.default", flat, [shape[0], -1], backward=backward)
    if kind == "index":  # ``w[0]`` as a symbolic trace records it: no view to the spec (not getitem of a
        # multi-output view op), so a real consumer; a rule taking any getitem for a view moves it
        return c.call("operator.getitem", tensor, 0, backward=backward)
    if kind == "pair":  # one view reached through two view parents, one reader of two aliases
        flat = c.call("aten.view.default", tensor, [-1], backward=backward)
        again = c.call("aten.view_as.default", flat, tensor, backward=backward)
        return c.call("aten.add.Tensor", again, tensor, backward=backward)
    raise ValueError(f"unknown view kind {kind!r}")


def _column_major(c: Composer, tensor: str) -> str:
    """``tensor``'s values in a layout whose first two strides are swapped (non-contiguous)."""
    flipped = c.call("aten.transpose.int", tensor, 0, 1)
    return c.call("aten.transpose.int", c.call("aten.contiguous.default", flipped), 0, 1)


def _gather(c: Composer, fqn: str, draw: ParamDraw, source: str | None, backward: bool = False) -> str:
    """One gather of ``fqn`` (its wait): with a wire dtype, the gather moves a cast of the parameter
    (each gather casts afresh, as a recomputed pre-all-gather does)."""
    if draw.wire:
        param = source or c.param_spec(fqn).placeholder
        source = c.call("prims.convert_element_type.default", param, dtype_from_name(draw.wire), backward=backward)
        if draw.scaled:
            amax = c.call("aten.amax.default", c.call("aten.abs.default", param, backward=backward), [],
                          backward=backward)
            gain = c.call("prims.convert_element_type.default", amax, dtype_from_name("float32"), backward=backward)
            source = c.call("aten.mul.Tensor", source, gain, backward=backward)
    return c.all_gather(fqn, backward=backward, source=source)[1]


def _unpacked(c: Composer, draw: ParamDraw, gathered: str, backward: bool) -> str:
    """What a use of the gathered parameter reads: a storage-only wire is cast back to the
    parameter's dtype at the use (the post-all-gather step of float8 and quantised gathers)."""
    if draw.frozen:
        return c.call("prims.convert_element_type.default", gathered, dtype_from_name("float32"), backward=backward)
    if draw.wire not in STORAGE_ONLY:
        return gathered
    return c.call("prims.convert_element_type.default", gathered, dtype_from_name(draw.dtype), backward=backward)


def _prep_chain(c: Composer, grad: str, fqn: str, kind: str, halves: bool = False) -> tuple[str, dict]:
    """The RS input and launch meta of a tagged prep chain of ``kind`` (PREP_KINDS); ``halves``: an
    own chain of two branches, each half of the gradient (a slice, outside the chain) reshaped
    without a phase tag, as a pass inserts it, then concatenated (a walk must follow both)."""
    owner = f"prep:{fqn}"
    tags = {"fsdp_bucket_prepare": owner}
    rows = c.shape(grad)[0] if c.shape(grad) else 0
    if halves and kind == "own" and rows >= 2:
        half, rest = rows // 2, list(c.shape(grad)[1:])
        pieces = [c.call("aten.reshape.default", c.call("aten.slice.Tensor", grad, 0, start, end, backward=True),
                         [end - start, *rest], meta=tags) for start, end in ((0, half), (half, rows))]
        grad = c.call("aten.cat.default", pieces, backward=True, meta=tags)
    elif kind == "other_op":
        grad = c.call("aten.clone.default", grad, backward=True, meta=tags)
    elif kind == "shared":
        grad = c.call("aten.reshape.default", grad, list(c.shape(grad)), backward=True, meta=tags)
        c.call("aten.neg.default", grad, backward=True)  # a reader outside the chain
    source_meta = {**tags, "fsdp_reduce_scatter_prepare": owner}
    if kind == "forward_source":  # spec 1.7 rule 3: a source tagged forward explicitly makes no chain
        source_meta["autograd_backward"] = False
    elif kind == "backward_source":
        # the source tagged backward, as a traced backward graph has it, after a reshape of the chain
        # a pass inserted without the flag: the chain is still the launch's, whatever its phases
        grad = c.call("aten.reshape.default", grad, list(c.shape(grad)), meta=tags)
    source = c.call("aten.contiguous.default", grad, backward=kind == "backward_source", meta=source_meta)
    return source, {"fsdp_bucket_id": f"other:{fqn}" if kind == "foreign_owner" else owner}


# Hypothesis draws the same blueprint again and again while it shrinks (one in four renders of a
# two-bug shrink was new) and now and then while it generates (three in four): rendering is nearly
# half of a draw. Sharing one GraphSpec between cases is sound because a GraphSpec is frozen and
# nothing edits one in place: the harness's mutations, localisations and rewrites build new ones,
# and a target under test sees FX modules built from copies (the builder copies meta; the header's
# parameters are frozen records, its groups tuples). A test judges drawn, hazard and planted cases
# on every checker and asserts each shared graph still equals a fresh render. The last 32 hold
# nearly every repeat (a two-bug shrink: 172 of 176 hits; 512 add four); graphs of more than 128
# parameters (the scale size: 10,000 nodes each) are never kept.
RENDERED_CAPACITY = 32
RENDERED_MAX_PARAMS = 128


def render(bp: Blueprint) -> GraphSpec:
    """The FSDP-tagged joint graph the blueprint describes: one shared, read-only GraphSpec per
    blueprint of up to RENDERED_MAX_PARAMS parameters among the last RENDERED_CAPACITY."""
    if sum(len(block) for block in bp.blocks) <= RENDERED_MAX_PARAMS:
        return _shared(bp)
    return fresh_render(bp)


@functools.lru_cache(maxsize=RENDERED_CAPACITY)
def _shared(bp: Blueprint) -> GraphSpec:
    return fresh_render(bp)


def fresh_render(bp: Blueprint) -> GraphSpec:
    """A new GraphSpec of what the blueprint describes (``render`` without the sharing)."""
    c = Composer(_groups(bp), overload=bp.overload)
    x = c.input("x", (bp.batch,), "float32")
    params = bp.params()
    for index, (fqn, draw) in enumerate(params):
        c.param(fqn, draw.shard_shape, state_idx=index, dtype=draw.dtype, device=bp.device,
                group=_group_of(draw))
    sources = {fqn: _column_major(c, c.param_spec(fqn).placeholder) for fqn, draw in params
               if draw.layout == "column_major" and len(draw.shard_shape) >= 2}
    waits: dict[str, str] = {}
    if not bp.reshard_after_forward:
        for fqn, draw in params:
            waits[fqn] = _gather(c, fqn, draw, sources.get(fqn))
    h = c.call("aten.sum.default", x)
    for fqn, draw in params:
        if bp.reshard_after_forward:
            waits[fqn] = _gather(c, fqn, draw, sources.get(fqn))
        view = _view_chain(c, _unpacked(c, draw, waits[fqn], backward=False), draw.view, backward=False,
                           packets=not bp.overload)
        scaled = c.call("aten.mul.Tensor", view, h)
        if bp.reshard_after_forward and draw.regather:
            c.free(waits[fqn], fqn=fqn)
        h = c.call("aten.clamp.default", c.call("aten.add.Tensor", h, c.call("aten.sum.default", scaled)),
                   -BOUND, BOUND)
    loss = h
    g = c.call("aten.add.Tensor", loss, loss, backward=True)
    grads: dict[str, str] = {}
    for fqn, draw in reversed(params):
        regather = bp.reshard_after_forward and draw.regather
        full = _gather(c, fqn, draw, sources.get(fqn), backward=True) if regather else waits[fqn]
        used = _unpacked(c, draw, full, backward=True)
        view = _view_chain(c, used, draw.view, backward=True, packets=not bp.overload)
        contribution = c.call("aten.sum.default", c.call("aten.mul.Tensor", view, g, backward=True), backward=True)
        if not draw.frozen:
            grads[fqn] = c.call("aten.mul.Tensor", used, g, backward=True)
        if regather:
            c.free(full, backward=True, fqn=fqn)
        g = c.call("aten.clamp.default", c.call("aten.add.Tensor", g, contribution, backward=True), -BOUND, BOUND,
                   backward=True)
    outputs = [loss]
    trained = [fqn for fqn, draw in params if not draw.frozen]
    for fqn, draw in params:
        if draw.frozen:
            continue
        source, launch_meta = grads[fqn], {}
        if bp.prep_chains:
            source, launch_meta = _prep_chain(c, source, fqn, bp.prep if fqn == trained[-1] else "own",
                                              bp.prep_in_halves)
        outputs.append(c.reduce_scatter(source, fqn, reduce_op=draw.reduce_op, launch_meta=launch_meta)[1])
    fqns = [fqn for fqn, _ in params]
    return c.finish(outputs, attrs={"state_fqns": fqns, "num_state_inputs": len(fqns),
                                    "state_is_param": [True] * len(fqns)})


__all__ = ["DTYPES", "LAYOUTS", "STORAGE_ONLY", "WIRES", "PREP_KINDS", "VIEW_KINDS", "Blueprint", "ParamDraw",
           "fresh_render", "render"]
