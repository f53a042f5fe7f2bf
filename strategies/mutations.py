"""One targeted defect at a time: each mutation plants exactly what one planner rule rejects.

A skip mutation breaks one tagged launch so that its first failing rule (spec section 2.5) is
the named reason; a split mutation acts on two consecutive compatible launches A < B so that
the named split check (section 2.7) fires between them; the rest break planner arguments.
Every mutated graph still builds and runs, so the target under test is still exercised.
Mutations return None where a site does not fit (the strategy then picks another).
"""

from __future__ import annotations

import enum
from collections import Counter

import math
import zlib
from dataclasses import replace
from typing import Any, Callable, Optional

import torch

from fsdp_verify.model.case import Case
from fsdp_verify.graph import collectives, edit
from fsdp_verify.strategies.annotate import reannotating
from fsdp_verify.graph.compose import ALL_REDUCE, BARRIER, FREE, WAIT
from fsdp_verify.graph.spec import TRACED, GraphSpec, NodeSpec, ParamSpec, cast_dtype
from fsdp_verify.graph.values import DTYPE_NAMES, NodeRef

RS_KIND = "fsdp_reduce_scatter"
AG_KINDS = ("fsdp_all_gather", "fsdp_all_gather_backward")


_PLANTED: dict[str, dict[str, list[Callable]]] = {"skip": {}, "split": {}, "singleton": {}}


def plants(action: str, reason: str) -> Callable[[Callable], Callable]:
    """Register a mutation as planting a defect the planner must answer with ``action`` for
    ``reason`` (skip: ``(case, launch)``; split and singleton: ``(case, a, b)``)."""
    def register(fn: Callable) -> Callable:
        _PLANTED[action].setdefault(reason, []).append(fn)
        return fn
    return register


def acts_on(*kinds: str) -> Callable[[Callable], Callable]:
    """Declare the launch kinds a mutation can act on (``fits`` reads it; undeclared: any)."""
    def declare(fn: Callable) -> Callable:
        fn.acts_on = frozenset(kinds)
        return fn
    return declare


class Cast(enum.Enum):
    """The cast a mutation's draw must give a block (``needs_cast``)."""

    PLAIN = "plain"  # its first parameter gathers a half-precision cast
    SCALED = "scaled"  # the same cast times a 0-dim float32 gain
    PAIR = "pair"  # its first two parameters gather a uint8 and a half-precision cast
    WIDE_PAIR = "wide_pair"  # the same with an int32 cast for the uint8: only float64 holds both
    FLOAT8_VENDORS = "float8_vendors"  # AMD's float8_e4m3fnuz beside the OCP float8_e4m3fn: float16 holds both
    FLOAT8_AMD = "float8_amd"  # AMD's two float8 formats, e4m3fnuz beside e5m2fnuz: float16 holds both


class Rows(enum.Enum):
    """The rows a mutation needs its cast parameter's shard to have (``needs_cast``)."""

    WIDE = "wide"  # two or more elements each: a per-row reduction stays dimensioned when squeezed
    SINGLE = "single"  # one element each, of two or more dims: a squeeze of it is 0-dim

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether a shard of ``shape`` has two or more dims and rows of this kind."""
        if len(shape) < 2:
            return False
        return math.prod(shape[1:]) >= 2 if self is Rows.WIDE else math.prod(shape[1:]) == 1


def needs_cast(scaled: bool = False, pair: Optional[Cast] = None, rows: Optional[Rows] = None) -> Callable[[Callable], Callable]:
    """Declare a mutation that acts on a gather of a low-precision cast (``scaled``: times its gain):
    its draw gives the first parameter of a block of two or more such a gather (``pair``, a pair
    kind of ``Cast``: the first two, each its own cast; ``rows``: a block whose first parameter's
    shard has such rows, drawn so where none is)."""
    def declare(fn: Callable) -> Callable:
        fn.needs_cast = pair or (Cast.SCALED if scaled else Cast.PLAIN)
        fn.needs_rows = rows
        return fn
    return declare


def gathered_ahead(fn: Callable) -> Callable:
    """Declare a mutation that needs launches issued ahead of their consumers, as a prefetching
    schedule (no reshard after forward) has them: its draw renders the blueprint so."""
    fn.gathered_ahead = True
    return fn


def _wait_of(spec: GraphSpec, launch: str) -> Optional[str]:
    users = edit.users_of(spec, launch)
    return users[0] if users else None


def _set(case: Case, node: str, **meta) -> Case:
    return replace(case, graph=edit.update_node(case.graph, node, meta=meta))


def _spec_meta(case: Case, node: str, **changes) -> Case:
    bucket_spec = dict(case.graph.node(node).meta.get("fsdp_bucket_spec", {}))
    bucket_spec.update(changes)
    return _set(case, node, fsdp_bucket_spec=bucket_spec)


def _kind(case: Case, node: str) -> str:
    return case.graph.node(node).meta.get("comm_type", "")


# -- skip mutations: (case, launch) -> case ------------------------------------------------

@plants("skip", "unsupported_or_already_bucketed")
def already_bucketed(case: Case, launch: str) -> Case:
    return _set(case, launch, fsdp_bucket_members=[case.graph.node(launch).meta.get("param_name")])


@plants("skip", "unsupported_or_already_bucketed")
def wrong_op_for_kind(case: Case, launch: str) -> Case:
    other = "fsdp_all_gather" if _kind(case, launch) == RS_KIND else RS_KIND
    return _set(case, launch, comm_type=other)


@plants("skip", "unsupported_or_already_bucketed")
@acts_on(*AG_KINDS)
def tagged_placeholder(case: Case, launch: str) -> Optional[Case]:
    """The launch's tags copied onto its source parameter: a tagged node that is no call at all."""
    source = case.graph.node(launch).args[0]
    if not isinstance(source, NodeRef) or case.graph.node(source.name).op != "placeholder":
        return None
    tags = {k: v for k, v in case.graph.node(launch).meta.items() if k != "autograd_backward"}
    return _set(case, source.name, **tags)


@plants("skip", "phase_mismatch")
@acts_on("fsdp_all_gather")
def forward_gather_tagged_backward(case: Case, launch: str) -> Case:
    return _set(case, launch, autograd_backward=True)


@plants("skip", "phase_mismatch")
@acts_on("fsdp_all_gather_backward")
def backward_gather_untagged(case: Case, launch: str) -> Case:
    return _set(case, launch, autograd_backward=edit.DROP)


@plants("skip", "phase_mismatch")
@acts_on(RS_KIND)
def reduce_scatter_untagged(case: Case, launch: str) -> Case:
    """An RS left in the forward phase (spec 1.4: required by the planner, not seen in public code)."""
    return _set(case, launch, autograd_backward=edit.DROP)


@plants("skip", "unsupported_signature")
def kwargs_signature(case: Case, launch: str) -> Case:
    node = case.graph.node(launch)
    graph = edit.update_node(case.graph, launch, args=node.args[:-1], kwargs={"group_name": node.args[-1]})
    return replace(case, graph=graph)


@plants("skip", "unsupported_signature")
def extra_positional(case: Case, launch: str) -> Case:
    """One positional argument too many (the group name again; executors bind by schema position)."""
    node = case.graph.node(launch)
    return replace(case, graph=edit.update_node(case.graph, launch, args=(*node.args, node.args[-1])))


@plants("skip", "unknown_process_group")
def unknown_group(case: Case, launch: str) -> Case:
    """The planner is not told about the launch's group (the graph still runs on it)."""
    group = case.graph.node(launch).args[-1]
    return case.with_args(omit_groups=(*case.plan_args.omit_groups, group))


def _degree(case: Case, launch: str, degree: object) -> Case:
    node = case.graph.node(launch)
    return replace(case, graph=edit.update_node(case.graph, launch, args=(*node.args[:-2], degree, node.args[-1])))


@plants("skip", "group_size_mismatch")
def group_size_mismatch(case: Case, launch: str) -> Case:
    """The degree argument disagrees with the group (executors resolve groups by name)."""
    return _degree(case, launch, case.graph.node(launch).args[-2] * 2)


@plants("skip", "group_size_mismatch")
def degree_bool(case: Case, launch: str) -> Case:
    """A degree of True: an int to Python, not a plain int to the planner."""
    return _degree(case, launch, True)


@plants("skip", "group_size_mismatch")
def degree_one(case: Case, launch: str) -> Case:
    return _degree(case, launch, 1)


@plants("skip", "group_size_mismatch")
def degree_off_by_one(case: Case, launch: str) -> Case:
    """One below the group's size where that is above 1 (a check for too large a degree alone passes
    it), else one above."""
    degree = case.graph.node(launch).args[-2]
    return _degree(case, launch, degree - 1 if degree >= 3 else degree + 1)


@plants("skip", "group_size_mismatch")
def degree_float(case: Case, launch: str) -> Case:
    """The group's size as a float (``world_size / tp`` is one in Python 3): equal, but no int."""
    return _degree(case, launch, float(case.graph.node(launch).args[-2]))


@plants("skip", "group_metadata_mismatch")
def group_meta_mismatch(case: Case, launch: str) -> Case:
    return _set(case, launch, comm_group=f"not_{case.graph.node(launch).args[-1]}")


@plants("skip", "group_metadata_mismatch")
def group_meta_names_default_group(case: Case, launch: str) -> Case:
    """The meta names the default process group by its c10d name (``"0"``), not the launch's group:
    a name that sorts before every drawn group's, so a rule that compares the names by order
    (``>`` for ``!=``) lets it through where ``not_<group>`` (sorting after) is still refused."""
    return _set(case, launch, comm_group="0")


@plants("skip", "missing_parameter_identity")
def missing_identity(case: Case, launch: str) -> Case:
    return _set(case, launch, state_idx=True)


@plants("skip", "missing_parameter_identity")
def no_param_name(case: Case, launch: str) -> Case:
    """A launch the identity annotator never reached (spec 1.4 step 4)."""
    return _set(case, launch, param_name=edit.DROP)


@plants("skip", "missing_parameter_identity")
def empty_param_name(case: Case, launch: str) -> Case:
    return _set(case, launch, param_name="")


@plants("skip", "missing_parameter_identity")
def no_state_idx(case: Case, launch: str) -> Case:
    """A backward re-gather of the public pass, which lacks ``state_idx`` (spec 1.4 step 4)."""
    return _set(case, launch, state_idx=edit.DROP)


@plants("skip", "missing_parameter_identity")
def negative_state_idx(case: Case, launch: str) -> Case:
    return _set(case, launch, state_idx=-1)


@plants("skip", "unknown_or_dynamic_shape")
def dynamic_shape(case: Case, launch: str) -> Case:
    return _spec_meta(case, launch, input_shape=("s0", 4))


def _bad_shape(field: str, how: str) -> Callable[[Case, str], Case]:
    """One way a spec shape fails rule 8: not a sequence, empty, a symbolic dim or a dim <= 0 (zero and
    negative both: a test of ``dim != 0`` passes every zero draw)."""

    def mutate(case: Case, launch: str) -> Case:
        shape = tuple(case.graph.node(launch).meta["fsdp_bucket_spec"][field])
        value = {"scalar": math.prod(shape), "empty": (), "symbolic": (*shape[:-1], "s0"),
                 "zero": (0, *shape[1:]), "negative": (*shape[:-1], -1)}[how]
        return _spec_meta(case, launch, **{field: value})

    mutate.__name__ = mutate.__qualname__ = f"{field}_{how}"
    return mutate


BAD_SHAPES = tuple(plants("skip", "unknown_or_dynamic_shape")(_bad_shape(field, how))
                   for field in ("input_shape", "output_shape")
                   for how in ("scalar", "empty", "symbolic", "zero", "negative")
                   if (field, how) != ("input_shape", "symbolic"))


@plants("skip", "unknown_or_dynamic_shape")
def missing_spec(case: Case, launch: str) -> Case:
    return _set(case, launch, fsdp_bucket_spec=edit.DROP)


@plants("skip", "unsupported_dtype")
def unsupported_dtype(case: Case, launch: str) -> Case:
    return _spec_meta(case, launch, dtype=torch.int32)


@plants("skip", "unsupported_dtype")
def dtype_name(case: Case, launch: str) -> Case:
    """The dtype's name where a ``torch.dtype`` belongs."""
    return _spec_meta(case, launch, dtype=str(case.graph.node(launch).meta["fsdp_bucket_spec"]["dtype"]))


@plants("skip", "unknown_device")
def unknown_device(case: Case, launch: str) -> Case:
    return _spec_meta(case, launch, device="npu:0")


@plants("skip", "unknown_device")
def device_object(case: Case, launch: str) -> Case:
    """A ``torch.device`` where the spec wants its string."""
    return _spec_meta(case, launch, device=torch.device("cpu"))


@plants("skip", "invalid_dim0_layout")
def bad_dim0(case: Case, launch: str) -> Case:
    bucket_spec = case.graph.node(launch).meta.get("fsdp_bucket_spec", {})
    return _spec_meta(case, launch, output_shape=bucket_spec.get("input_shape"))


@plants("skip", "invalid_dim0_layout")
def dim0_too_large(case: Case, launch: str) -> Case:
    """The larger shape's dim 0 twice what the degree makes it: a layout rule that compares shapes by
    order (``<``) passes a shape too large, where ``bad_dim0``'s too small one is refused either way."""
    bucket_spec = case.graph.node(launch).meta.get("fsdp_bucket_spec", {})
    field = "input_shape" if _kind(case, launch) == RS_KIND else "output_shape"
    shape = tuple(bucket_spec.get(field) or ())
    return _spec_meta(case, launch, **{field: (shape[0] * 2, *shape[1:]) if shape else shape})


@plants("skip", "unsupported_wait_users")
def double_wait(case: Case, launch: str) -> Case:
    wait = _wait_of(case.graph, launch)
    name = edit.fresh_name(case.graph, f"{wait}_again")
    node = case.graph.node(wait)
    extra = NodeSpec(name, "call_function", node.target, (NodeRef(launch),), {}, dict(node.meta))
    return replace(case, graph=edit.insert_after(case.graph, wait, [extra]))


def unwaited_name(launch: str) -> str:
    """The launch ``unwaited_launch`` adds for ``launch``."""
    return f"{launch}_unwaited"


@plants("skip", "unsupported_wait_users")
def unwaited_launch(case: Case, launch: str) -> Optional[Case]:
    """A second launch of the same collective, read by a barrier call instead of a wait.

    It sits just before the output, after every other launch, so no bucket span holds the barrier.
    """
    node = case.graph.node(launch)
    output = case.graph.nodes[-1].name
    name = unwaited_name(launch)
    if name in {n.name for n in case.graph.nodes}:
        return None
    nodes = [NodeSpec(name, "call_function", node.target, node.args, dict(node.kwargs), dict(node.meta)),
             edit.call(edit.fresh_name(case.graph, f"{name}_read"), BARRIER, NodeRef(name), meta=_phase(case, launch))]
    return replace(case, graph=edit.insert_before(case.graph, output, nodes))


def unread_name(launch: str) -> str:
    """The launch ``launch_without_users`` adds for ``launch``."""
    return f"{launch}_unread"


@plants("skip", "unsupported_wait_users")
def launch_without_users(case: Case, launch: str) -> Optional[Case]:
    """A second launch of the same collective that nothing reads, not even a wait (a gather whose
    result a trace dropped): a rule that reads the launch's one user before counting its users fails
    on it. It sits just before the output, so no bucket span holds it."""
    node = case.graph.node(launch)
    name = unread_name(launch)
    if name in {n.name for n in case.graph.nodes}:
        return None
    copy = NodeSpec(name, "call_function", node.target, node.args, dict(node.kwargs), dict(node.meta))
    return replace(case, graph=edit.insert_before(case.graph, case.graph.nodes[-1].name, [copy]))


@plants("skip", "unsupported_wait_users")
def wait_in_legacy_namespace(case: Case, launch: str) -> Optional[Case]:
    """The launch's wait is the legacy packet's ``c10d_functional.wait_tensor`` (older code awaiting a
    launch of today's packet; torch runs either on either). Under the spec's default reading the
    launch is then a skip; under the [I] setting that counts that packet's ops as the kind's own
    (spec 1.2 ``is_op``; pinned, or drawn: a ``+spec`` hunt) it is a candidate like any other. The
    case records no setting: a planner that reads the default is judged by the default."""
    wait = _wait_of(case.graph, launch)
    node = case.graph.node(wait) if wait else None
    if node is None or node.op != "call_function" or collectives.op_name(node.target, (collectives.NAMESPACE,)) \
            != "wait_tensor":
        return None
    legacy = collectives.LEGACY_NAMESPACE + node.target[node.target.index("."):]  # the same op and overload
    return replace(case, graph=edit.update_node(case.graph, wait, target=legacy))


def unused_name(launch: str) -> str:
    """The launch ``unused_gather`` inserts next to ``launch``."""
    return f"{launch}_unused"


@plants("skip", "no_consumer")
@acts_on(*AG_KINDS)
def unused_gather(case: Case, launch: str) -> Optional[Case]:
    """A duplicate gather whose result nobody reads: the new launch has no consumer."""
    if _kind(case, launch) == RS_KIND:
        return None
    node = case.graph.node(launch)
    wait = _wait_of(case.graph, launch)
    new_launch = unused_name(launch)
    if new_launch in {n.name for n in case.graph.nodes}:
        return None
    new_wait = f"{new_launch}_wait"
    nodes = [NodeSpec(new_launch, "call_function", node.target, node.args, dict(node.kwargs), dict(node.meta)),
             NodeSpec(new_wait, "call_function", case.graph.node(wait).target, (NodeRef(new_launch),), {},
                      dict(case.graph.node(wait).meta))]
    return replace(case, graph=edit.insert_after(case.graph, wait, nodes))


@plants("skip", "unsupported_reduce_op")
@acts_on(RS_KIND)
def bad_reduce_op(case: Case, launch: str) -> Optional[Case]:
    if _kind(case, launch) != RS_KIND:
        return None
    node = case.graph.node(launch)
    return replace(case, graph=edit.update_node(case.graph, launch, args=(node.args[0], "max", *node.args[2:])))


@plants("skip", "non_output_rs_consumer")
@acts_on(RS_KIND)
def rs_extra_consumer(case: Case, launch: str) -> Optional[Case]:
    return _rs_read_by(case, launch, "aten.neg.default")


@plants("skip", "non_output_rs_consumer")
@acts_on(RS_KIND)
def rs_python_consumer(case: Case, launch: str) -> Optional[Case]:
    """The gradient read by Python's ``-`` (``operator.neg``, as a symbolic trace records it): a call
    with no schema is no view, so it is a consumer other than the output."""
    return _rs_read_by(case, launch, "operator.neg")


def _rs_read_by(case: Case, launch: str, target: str) -> Optional[Case]:
    if _kind(case, launch) != RS_KIND:
        return None
    wait = _wait_of(case.graph, launch)
    graph = case.graph
    output = graph.nodes[-1]
    neg = edit.fresh_name(graph, f"{wait}_neg")
    graph = edit.insert_before(graph, output.name, [edit.call(neg, target, NodeRef(wait),
                                                              meta={"autograd_backward": True})])
    outs = list(output.args[0]) + [NodeRef(neg)]
    return replace(case, graph=edit.update_node(graph, output.name, args=(outs,)))


# Parallel modes the planner must refuse: pipeline stages, and every data-parallel mode but the exact
# string "fsdp" (aliases and other spellings are not normalised, spec 2.5 rule 0).
PP_DEGREES = (2, 0)
DP_MODES = ("hsdp", "ddp", "FSDP", "")
PARALLEL_MODES = (*({"pp_degree": v} for v in PP_DEGREES), *({"dp_mode": m} for m in DP_MODES))


@plants("skip", "unsupported_parallel_mode")
def parallel_mode(case: Case, launch: str) -> Case:
    """One of ``PARALLEL_MODES``, picked by a hash of the launch's name and the graph's size: drawing
    a site draws a mode (a hash, not the position: small positions are drawn far more often)."""
    key = f"{launch}/{len(case.graph.nodes)}".encode()
    return case.with_args(**PARALLEL_MODES[zlib.crc32(key) % len(PARALLEL_MODES)])


@plants("skip", "outside_module_plan")
def outside_plan(case: Case, launch: str) -> Case:
    return case.with_args(module_bucket_plans=[["unplanned_module"]])




# -- split mutations: (case, a, b) -> case -------------------------------------------------

def _size_bytes(node: NodeSpec) -> int:
    spec = node.meta["fsdp_bucket_spec"]
    return max(math.prod(spec["input_shape"]), math.prod(spec["output_shape"])) * spec["dtype"].itemsize


@plants("split", "repeated_parameter_instance")
def repeated_state_idx(case: Case, a: str, b: str) -> Case:
    return _set(case, b, state_idx=case.graph.node(a).meta["state_idx"])


@plants("split", "repeated_parameter_instance")
def repeated_param_name(case: Case, a: str, b: str) -> Case:
    return _set(case, b, param_name=case.graph.node(a).meta["param_name"])


@plants("split", "capacity")
def capacity(case: Case, a: str, b: str) -> Case:
    sizes = (_size_bytes(case.graph.node(a)), _size_bytes(case.graph.node(b)))
    return case.with_args(policy={"cap_bytes": max(sizes)})


@plants("split", "capacity")
def capacity_boundary(case: Case, a: str, b: str) -> Case:
    """A cap exactly one byte below the pair's combined size: the off-by-one boundary."""
    total = _size_bytes(case.graph.node(a)) + _size_bytes(case.graph.node(b))
    return case.with_args(policy={"cap_bytes": total - 1})


def capacity_exact(case: Case, a: str, b: str) -> Case:
    """A cap exactly the pair's combined size: the pair still fuses (the cap is inclusive, spec 2.7)."""
    total = _size_bytes(case.graph.node(a)) + _size_bytes(case.graph.node(b))
    return case.with_args(policy={"cap_bytes": total})


def input_distance_exact(case: Case, a: str, b: str) -> Case:
    """A limit on the sources' distance exactly the pair's: the pair still fuses (the limit is
    inclusive, spec 2.7, as the cap is)."""
    graph = case.graph
    sources = [graph.node(launch).args[0] for launch in (a, b)]
    where = [edit.index_of(graph, source.name) if isinstance(source, NodeRef) else 0 for source in sources]
    return case.with_args(policy={"max_input_distance": abs(where[1] - where[0])})


@plants("singleton", "oversized")
def oversized(case: Case, a: str, b: str) -> Case:
    return case.with_args(policy={"cap_bytes": max(1, _size_bytes(case.graph.node(b)) - 1)})


@plants("split", "input_distance")
def input_distance(case: Case, a: str, b: str) -> Case:
    return case.with_args(policy={"max_input_distance": 0})


@plants("split", "consumer_distance")
def consumer_distance(case: Case, a: str, b: str) -> Case:
    return case.with_args(policy={"max_consumer_distance": 0})


@plants("split", "dependency_conflict")
@acts_on(*AG_KINDS)
def late_source(case: Case, a: str, b: str) -> Optional[Case]:
    """B gathers a copy made after A's first consumer (a non-placeholder source, spec 5.5)."""
    if _kind(case, b) == RS_KIND:
        return None
    graph = case.graph
    node_b = graph.node(b)
    clone = edit.fresh_name(graph, f"{b}_src")
    meta = {"autograd_backward": True} if node_b.meta.get("autograd_backward") else {}
    graph = edit.insert_before(graph, b, [edit.call(clone, "aten.clone.default", node_b.args[0], meta=meta)])
    return replace(case, graph=edit.update_node(graph, b, args=(NodeRef(clone), *node_b.args[1:])))


@plants("split", "dependency_conflict")
@acts_on(*AG_KINDS)
def dependent_source(case: Case, a: str, b: str) -> Optional[Case]:
    """B gathers its shard plus the sum of what A gathered: B's source is computed from A's result,
    so a bucket of both would wait on itself (one node past the dependency window's boundary, the
    sum being A's first consumer; ``source_is_first_consumer`` draws the boundary). B's launch moves
    to just after A's wait, where its new source is ready."""
    wait_a = _wait_before(case, a, b)
    graph = _source_ready(case.graph, b, wait_a) if wait_a is not None else None
    if graph is None:
        return None
    node_b = graph.node(b)
    meta = {"autograd_backward": True} if node_b.meta.get("autograd_backward") else {}
    total, shifted = edit.fresh_name(graph, f"{a}_sum"), edit.fresh_name(graph, f"{b}_src")
    nodes = [edit.call(total, "aten.sum.default", NodeRef(wait_a), meta=meta),
             edit.call(shifted, "aten.add.Tensor", node_b.args[0], NodeRef(total), meta=meta)]
    return replace(case, graph=_gathered_after(graph, wait_a, b, nodes))


def _wait_before(case: Case, a: str, b: str) -> Optional[str]:
    """A's wait, where B is an all-gather whose wait comes after it (None otherwise)."""
    graph = case.graph
    wait_a, wait_b = _wait_of(graph, a), _wait_of(graph, b)
    if _kind(case, b) == RS_KIND or wait_a is None or wait_b is None:
        return None
    return wait_a if edit.index_of(graph, wait_a) < edit.index_of(graph, wait_b) else None


def _gathered_after(graph: GraphSpec, wait_a: str, b: str, nodes: list[NodeSpec]) -> GraphSpec:
    """``graph`` with ``nodes`` right after A's wait and launch B after them, gathering the last."""
    moved = replace(graph.node(b), args=(NodeRef(nodes[-1].name), *graph.node(b).args[1:]))
    graph = graph.with_nodes([node for node in graph.nodes if node.name != b])
    return edit.insert_after(graph, wait_a, [*nodes, moved])


@plants("split", "dependency_conflict")
@acts_on(*AG_KINDS)
def source_is_first_consumer(case: Case, a: str, b: str) -> Optional[Case]:
    """B gathers a copy of the first elements of what A gathered, reshaped to B's shard through
    views: that copy is both A's first real consumer and B's source, so the latest input and the
    earliest consumer are one node (the dependency window's exact boundary: ready == first use).
    A bucket of both would wait on itself; a window that splits only when the source comes later
    fuses them."""
    graph, wait_a = case.graph, _wait_before(case, a, b)
    if wait_a is None:
        return None
    spec_a, spec_b = graph.node(a).meta["fsdp_bucket_spec"], graph.node(b).meta["fsdp_bucket_spec"]
    numel = math.prod(spec_b["input_shape"])
    if not 0 < numel <= math.prod(spec_a["output_shape"]):
        return None
    # what each gather moves, not its spec's dtype: A may gather a cast (a float32 gather of a float64
    # parameter), and B's new source must hold what B moved, or B's gradient changes dtype with it
    moved_a, moved_b = _moved(case, a), _moved(case, b)
    if moved_a is None or moved_b is None:
        return None
    meta = _phase(case, b)
    flat, part, shaped, copied = (edit.fresh_name(graph, f"{a}_{suffix}") for suffix in ("flat", "part", "shaped",
                                                                                          "copied"))
    copy = (edit.call(copied, "aten.clone.default", NodeRef(shaped), meta=meta) if moved_a == moved_b else
            edit.call(copied, CAST, NodeRef(shaped), moved_b, meta=meta))
    nodes = [edit.call(flat, "aten.view.default", NodeRef(wait_a), [-1], meta=meta),
             edit.call(part, "aten.slice.Tensor", NodeRef(flat), 0, 0, numel, meta=meta),
             edit.call(shaped, "aten.view.default", NodeRef(part), list(spec_b["input_shape"]), meta=meta), copy]
    return replace(case, graph=_gathered_after(graph, wait_a, b, nodes))


def _moved(case: Case, launch: str) -> Optional[torch.dtype]:
    """The dtype ``launch`` gathers: its spec's for the parameter itself, a cast's (by position or
    keyword, or ``_to_copy``'s) for a cast of it, that cast's for a cast times a gain (a 0-dim float32
    gain keeps a cast's dtype); None for any other source."""
    graph = case.graph
    source = graph.node(launch).args[0]
    node = graph.node(source.name) if isinstance(source, NodeRef) else None
    if node is not None and node.target == "aten.mul.Tensor" and node.args and isinstance(node.args[0], NodeRef):
        node = graph.node(node.args[0].name)  # the scaled cast's cast
    if node is None:
        return None
    dtype = graph.node(launch).meta["fsdp_bucket_spec"]["dtype"] if node.op == "placeholder" else cast_dtype(node)
    return dtype if isinstance(dtype, torch.dtype) else None


def _phase(case: Case, node: str) -> dict:
    return {"autograd_backward": True} if case.graph.node(node).meta.get("autograd_backward") else {}


@plants("split", "effect_or_storage_release")
def barrier_between(case: Case, a: str, b: str) -> Case:
    name = edit.fresh_name(case.graph, "barrier")
    node = edit.call(name, BARRIER, meta=_phase(case, b))
    return replace(case, graph=edit.insert_before(case.graph, b, [node]))


@plants("split", "effect_or_storage_release")
def foreign_free_between(case: Case, a: str, b: str) -> Case:
    """A tagged free of a tensor that no member gathered."""
    graph = case.graph
    clone = edit.fresh_name(graph, "scratch")
    free = edit.fresh_name(graph, "free_scratch")
    phase = _phase(case, b)
    source = graph.node(a).args[0]
    kind = "fsdp_reshard_free_backward" if phase else "fsdp_reshard_free"
    nodes = [edit.call(clone, "aten.clone.default", source, meta=phase),
             edit.call(free, FREE, NodeRef(clone), meta={**phase, "comm_type": kind})]
    return replace(case, graph=edit.insert_before(graph, b, nodes))


def _written_between(case: Case, a: str, b: str, write: Callable[[str, str, dict], NodeSpec]) -> Optional[Case]:
    """A gathers (or scatters) a private copy of its source, which a mutating op then overwrites
    after A's wait and before B: a bucket of both launched at B would send the overwritten copy.
    The original is race-free (the write follows A's wait), so only the rewrite can go wrong."""
    graph = case.graph
    wait_a = _wait_of(graph, a)
    if wait_a is None or not edit.index_of(graph, wait_a) < edit.index_of(graph, b):
        return None
    node_a = graph.node(a)
    copy = edit.fresh_name(graph, f"{a}_src")
    graph = edit.insert_before(graph, a, [edit.call(copy, "aten.clone.default", node_a.args[0], meta=_phase(case, a))])
    graph = edit.update_node(graph, a, args=(NodeRef(copy), *node_a.args[1:]))
    written = write(edit.fresh_name(graph, f"{a}_overwrite"), copy, _phase(case, b))
    return replace(case, graph=edit.insert_before(graph, b, [written]))


@plants("split", "effect_or_storage_release")
def in_place_between(case: Case, a: str, b: str) -> Optional[Case]:
    """An in-place op (its schema writes its argument) on A's source inside the span."""
    return _written_between(case, a, b, lambda name, copy, meta: edit.call(name, "aten.neg_.default", NodeRef(copy),
                                                                           meta=meta))


@plants("split", "effect_or_storage_release")
def out_variant_between(case: Case, a: str, b: str) -> Optional[Case]:
    """An ``out=`` op writing A's source inside the span (the write is the out argument's)."""
    return _written_between(case, a, b, lambda name, copy, meta: edit.call(name, "aten.neg.out", NodeRef(copy),
                                                                           meta=meta, out=NodeRef(copy)))


@plants("split", "intervening_collective")
def collective_between(case: Case, a: str, b: str) -> Case:
    graph = case.graph
    launch = edit.fresh_name(graph, "foreign_all_reduce")
    nodes = _all_reduced(launch, graph.node(a).args[0], "sum", graph.node(a).args[-1], _phase(case, b))
    return replace(case, graph=edit.insert_before(graph, b, nodes))


def _all_reduced(launch: str, tensor: Any, op: str, group: Any, meta: dict) -> list[NodeSpec]:
    """An all-reduce of ``tensor`` over ``group`` named ``launch``, and its wait (``launch``_wait)."""
    return [edit.call(launch, ALL_REDUCE, tensor, op, group, meta=meta),
            edit.call(f"{launch}_wait", WAIT, NodeRef(launch), meta=meta)]


@plants("split", "phase_boundary")
def phase_flip_between(case: Case, a: str, b: str) -> Case:
    graph = case.graph
    name = edit.fresh_name(graph, "other_phase")
    meta = {} if case.graph.node(b).meta.get("autograd_backward") else {"autograd_backward": True}
    node = edit.call(name, "aten.clone.default", graph.node(a).args[0], meta=meta)
    return replace(case, graph=edit.insert_before(graph, b, [node]))



# RS preparation chains (spec 1.7): a chain is crossable only where it is the launch's own. Bucket
# ids as a previous round writes them (spec 4.3: a signature prefix and the bucket's index), so an
# owner and a launch's id differ only in the index, and sort either way.
_PREP, _PREP_OWNER = "fsdp_bucket_prepare", "fsdp_reduce_scatter_prepare"
_ROUND = "5e1f0c2a9b3d"


def _bucket_id(index: int) -> str:
    return f"{_ROUND}:bucket_{index}"


def _gradient(case: Case, b: str) -> Optional[NodeSpec]:
    """b's gradient, when b is a reduce-scatter whose gradient no blueprint chain prepares yet."""
    node = case.graph.node(b)
    if _kind(case, b) != RS_KIND or not node.args or not isinstance(node.args[0], NodeRef):
        return None
    gradient = case.graph.node(node.args[0].name)
    return None if _PREP_OWNER in gradient.meta else gradient


def _prepared(case: Case, b: str, owner: str, launch_id: str, source_meta: Optional[dict] = None) -> Optional[Case]:
    """b's gradient through a one-node chain (``contiguous``, untagged by phase, as a pass inserts
    it) owned by ``owner``, b tagged with bucket id ``launch_id``."""
    gradient = _gradient(case, b)
    if gradient is None:
        return None
    graph = case.graph
    name = edit.fresh_name(graph, f"{b}_prepared")
    chain = edit.call(name, "aten.contiguous.default", NodeRef(gradient.name),
                      meta={_PREP: owner, _PREP_OWNER: owner, **(source_meta or {})})
    graph = edit.insert_before(graph, b, [chain])
    node = graph.node(b)
    graph = edit.update_node(graph, b, args=(NodeRef(name), *node.args[1:]), meta={"fsdp_bucket_id": launch_id})
    return replace(case, graph=graph)


@plants("split", "phase_boundary")
@acts_on(RS_KIND)
def chain_of_an_earlier_bucket(case: Case, a: str, b: str) -> Optional[Case]:
    """b's gradient prepared by a chain of another bucket, whose id sorts before b's: no chain of
    b's (spec 1.7 rule 5), so its node, of no phase, splits the span."""
    return _prepared(case, b, owner=_bucket_id(1), launch_id=_bucket_id(2))


@plants("split", "phase_boundary")
@acts_on(RS_KIND)
def chain_of_a_later_bucket(case: Case, a: str, b: str) -> Optional[Case]:
    """As ``chain_of_an_earlier_bucket``, the other bucket's id sorting after b's."""
    return _prepared(case, b, owner=_bucket_id(2), launch_id=_bucket_id(1))


@plants("split", "phase_boundary")
@acts_on(RS_KIND)
def chain_source_tagged_forward(case: Case, a: str, b: str) -> Optional[Case]:
    """b's own chain, its source tagged forward explicitly: no chain (spec 1.7 rule 3), so the
    source is a forward node in a backward span."""
    return _prepared(case, b, owner=_bucket_id(1), launch_id=_bucket_id(1),
                     source_meta={"autograd_backward": False})


# -- fusions the rewriter must get right: (case, a, b) -> case that still buckets a with b ---------

@acts_on(RS_KIND)
def chain_in_two_pieces(case: Case, a: str, b: str) -> Optional[Case]:
    """b's own chain in spec 4.3's shape, of one member: its gradient's two halves (slices, outside
    the chain) each reshaped, concatenated, made contiguous; the reshapes carry no phase, as a pass
    inserts them. The whole chain is b's preparation, so a and b still fuse. A walk that stops at
    the first input outside the chain (one half's slice) misses the other half's reshape, which
    then splits the span as a phase boundary."""
    gradient = _gradient(case, b)
    shape = (case.graph.node(b).meta.get("fsdp_bucket_spec") or {}).get("input_shape")
    if gradient is None or not shape or shape[0] < 2:
        return None
    graph, half, rest = case.graph, shape[0] // 2, list(shape[1:])
    low, high, low_view, high_view, joined, source = (
        edit.fresh_name(graph, f"{b}_{part}") for part in ("low", "high", "low_rows", "high_rows", "joined", "prepared"))
    owner, phase = _bucket_id(1), {"autograd_backward": True}
    chain = [edit.call(low, "aten.slice.Tensor", NodeRef(gradient.name), 0, 0, half, meta=phase),
             edit.call(high, "aten.slice.Tensor", NodeRef(gradient.name), 0, half, shape[0], meta=phase),
             edit.call(low_view, "aten.reshape.default", NodeRef(low), [half, *rest], meta={_PREP: owner}),
             edit.call(high_view, "aten.reshape.default", NodeRef(high), [shape[0] - half, *rest], meta={_PREP: owner}),
             edit.call(joined, "aten.cat.default", [NodeRef(low_view), NodeRef(high_view)], meta={_PREP: owner, **phase}),
             edit.call(source, "aten.contiguous.default", NodeRef(joined), meta={_PREP: owner, _PREP_OWNER: owner, **phase})]
    graph = edit.insert_before(graph, b, chain)
    node = graph.node(b)
    graph = edit.update_node(graph, b, args=(NodeRef(source), *node.args[1:]), meta={"fsdp_bucket_id": owner})
    return replace(case, graph=graph)


@acts_on(*AG_KINDS)
def source_after_view(case: Case, a: str, b: str) -> Optional[Case]:
    """B gathers a copy made after A's first view but before A's first real consumer: the pair still
    fuses, and the fused launch goes after that copy, so A's view must move past it (spec 4.2)."""
    if _kind(case, b) == RS_KIND:
        return None
    wait = _wait_of(case.graph, a)
    view = _wait_of(case.graph, wait) if wait else None
    if (view is None or case.graph.node(view).target not in VIEW_TARGETS
            or edit.index_of(case.graph, view) > edit.index_of(case.graph, b)):
        return None
    node_b = case.graph.node(b)
    graph = _source_ready(case.graph, b, view)
    if graph is None:
        return None
    clone = edit.fresh_name(graph, f"{b}_src")
    graph = edit.insert_after(graph, view, [edit.call(clone, "aten.clone.default", node_b.args[0],
                                                      meta=_phase(case, b))])
    return replace(case, graph=edit.update_node(graph, b, args=(NodeRef(clone), *node_b.args[1:])))


def _source_ready(graph, launch: str, before: str):
    """``graph`` with ``launch``'s source computed before node ``before``, after which a mutation
    inserts what reads it (a low-precision gather's
    cast sits right before its launch: it moves up, since it reads only the parameter), or None
    where the source cannot move there."""
    source = graph.node(launch).args[0]
    return edit.hoisted(graph, source.name, before) if isinstance(source, NodeRef) else graph


@gathered_ahead
@acts_on(*AG_KINDS)
def anchor_on_foreign_wait(case: Case, a: str, b: str) -> Optional[Case]:
    """The wait of another bucket's last launch moves into this pair's span, right after a copy
    that B now gathers: the pair's fused launch goes just before that wait, which the other
    bucket's own fusion erases (a rewriter that fuses the earlier bucket first has lost the node
    it inserts before). Launches issued ahead of their consumers, as a prefetching schedule has
    them, give the room: only graphs gathered before the forward (no reshard) fit."""
    graph = case.graph
    if _kind(case, b) == RS_KIND:
        return None
    at = edit.index_of(graph, a)
    keys = Counter(_site_key(node) for node in edit.tagged_launches(graph) if node.op == "call_function")
    # the other launch needs a sibling: a bucket of one is never fused, so its wait is never erased
    earlier = [node for node in graph.nodes[:at] if node.meta.get("comm_type") in AG_KINDS
               and _site_key(node) != _site_key(graph.node(a)) and keys[_site_key(node)] > 1]
    if not earlier:
        return None
    other = earlier[-1].name
    wait = _wait_of(graph, other)
    if wait is None or not edit.index_of(graph, other) < edit.index_of(graph, wait) < at:
        return None
    if any(edit.index_of(graph, user) <= at for user in edit.users_of(graph, wait)):
        return None  # what reads the wait must stay after it
    node_b, moved = graph.node(b), graph.node(wait)
    graph = _source_ready(graph, b, a)
    if graph is None:
        return None
    clone = edit.fresh_name(graph, f"{b}_src")
    graph = graph.with_nodes([node for node in graph.nodes if node.name != wait])
    graph = edit.insert_after(graph, a, [edit.call(clone, "aten.clone.default", node_b.args[0], meta=_phase(case, b)),
                                         moved])
    return replace(case, graph=edit.update_node(graph, b, args=(NodeRef(clone), *node_b.args[1:])))


FAR = 40  # copies between a cast and its gather: past any small bound on a dtype walk


@needs_cast(scaled=False)
@acts_on(*AG_KINDS)
def cast_far_up_the_chain(case: Case, a: str, b: str) -> Optional[Case]:
    """A's source is its low-precision cast followed by FAR copies (a long elementwise prologue
    before the gather): the pair still fuses, and A must still be packed and handed back in the
    cast's dtype, however far up the chain the cast is."""
    graph = case.graph
    source = graph.node(a).args[0]
    if _kind(case, b) == RS_KIND or not isinstance(source, NodeRef) or \
            graph.node(source.name).target not in ("prims.convert_element_type.default", "aten._to_copy.default"):
        return None
    meta = _phase(case, a)
    previous, chain = source.name, []
    for index in range(FAR):
        name = edit.fresh_name(graph, f"{a}_far_{index}")
        chain.append(edit.call(name, "aten.clone.default", NodeRef(previous), meta=meta))
        previous = name
    graph = edit.insert_after(graph, source.name, chain)
    node_a = graph.node(a)
    return replace(case, graph=edit.update_node(graph, a, args=(NodeRef(previous), *node_a.args[1:])))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def cast_scaled_twice(case: Case, a: str, b: str) -> Optional[Case]:
    """A's scaled cast (a half-precision cast times a 0-dim float32 gain) is scaled again by the same
    gain, as a recipe that applies its scale in two steps does: torch keeps the cast's dtype at each
    step, so only a walk that knows the first product is dimensioned gets the second right."""
    graph = case.graph
    source = graph.node(a).args[0]
    if _kind(case, b) == RS_KIND or not isinstance(source, NodeRef) or graph.node(source.name).target != "aten.mul.Tensor":
        return None
    scaled = graph.node(source.name)
    if len(scaled.args) != 2 or not all(isinstance(arg, NodeRef) for arg in scaled.args):
        return None
    again = edit.fresh_name(graph, f"{a}_rescaled")
    graph = edit.insert_after(graph, source.name, [edit.call(again, "aten.mul.Tensor", NodeRef(source.name),
                                                             scaled.args[1], meta=_phase(case, a))])
    return replace(case, graph=edit.update_node(graph, a, args=(NodeRef(again), *graph.node(a).args[1:])))


CAST = "prims.convert_element_type.default"


def _cast_source(case: Case, launch: str, computed: bool = False) -> Optional[NodeSpec]:
    """The positional convert_element_type ``launch`` gathers, if it gathers one; with ``computed``,
    only a cast to a dtype torch computes in (relu and promotion refuse float8 and int8)."""
    source = case.graph.node(launch).args[0]
    node = case.graph.node(source.name) if isinstance(source, NodeRef) else None
    if node is None or node.target != CAST or len(node.args) != 2:
        return None
    return node if not computed or node.args[1] in (torch.bfloat16, torch.float16, torch.float32) else None


@needs_cast()
@acts_on(*AG_KINDS)
def cast_dtype_by_keyword(case: Case, a: str, b: str) -> Optional[Case]:
    """A's low-precision cast names its dtype by keyword (``convert_element_type(x, dtype=bf16)``), as
    a hand-written graph or another tracer may: the same cast, so A is still packed and handed back
    in the cast's dtype."""
    cast = _cast_source(case, a)
    if _kind(case, b) == RS_KIND or cast is None:
        return None
    return replace(case, graph=edit.update_node(case.graph, cast.name, args=cast.args[:1],
                                                kwargs={**cast.kwargs, "dtype": cast.args[1]}))


@needs_cast()
@acts_on(*AG_KINDS)
def cast_as_to_copy(case: Case, a: str, b: str) -> Optional[Case]:
    """A's low-precision cast is ``aten._to_copy(x, dtype=bf16)``, the form a traced ``.to(dtype)``
    takes before decomposition: the same cast."""
    cast = _cast_source(case, a)
    if _kind(case, b) == RS_KIND or cast is None:
        return None
    return _as_to_copy(case, cast)


def _as_to_copy(case: Case, cast: NodeSpec) -> Case:
    """``case`` with the positional cast ``cast`` written ``aten._to_copy(x, dtype=...)``."""
    return replace(case, graph=edit.update_node(case.graph, cast.name, target="aten._to_copy.default",
                                                args=cast.args[:1], kwargs={"dtype": cast.args[1]}))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def scaled_cast_as_to_copy(case: Case, a: str, b: str) -> Optional[Case]:
    """A's scaled cast casts by ``aten._to_copy(p, dtype=bf16)``: dimensioned as its parameter is, so
    its 0-dim float32 gain leaves the product in the cast's dtype. Taken for 0-dim, the cast promotes
    with the gain to float32; where the cast is the gathered value itself, its rank reads nowhere."""
    cast, _ = _scaled_param(case, _scaled(case, a, b))
    if cast is None or cast.target != CAST or len(cast.args) != 2:
        return None
    return _as_to_copy(case, cast)


@needs_cast()
@acts_on(*AG_KINDS)
def cast_through_opaque_op(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers relu of its cast: an op the dtype walk has no table entry for keeps the cast's dtype,
    which only running the op as torch would tells (the spec dtype is the parameter's)."""
    return _cast_through(case, a, b, "aten.relu.default", "opaque")


def _cast_through(case: Case, a: str, b: str, target: str, suffix: str, **kwargs: Any) -> Optional[Case]:
    """A gathers ``target`` (with ``kwargs``) of its cast, a cast to a dtype torch computes in; None
    where A gathers no such cast."""
    cast = _cast_source(case, a, computed=True)
    if _kind(case, b) == RS_KIND or cast is None:
        return None
    graph = case.graph
    name = edit.fresh_name(graph, f"{a}_{suffix}")
    graph = edit.insert_after(graph, cast.name, [edit.call(name, target, NodeRef(cast.name), meta=_phase(case, a),
                                                           **kwargs)])
    return replace(case, graph=edit.update_node(graph, a, args=(NodeRef(name), *graph.node(a).args[1:])))


def _gain_replaced(case: Case, a: str, b: str, target: str, suffix: str, *args: Any) -> Optional[Case]:
    """A's scaled cast (``mul(cast, gain)``) with its gain replaced by a call of ``target`` on ``args``,
    where ``None`` stands for the gain; None where A gathers no such product."""
    graph = case.graph
    source = graph.node(a).args[0]
    scaled = graph.node(source.name) if isinstance(source, NodeRef) else None
    if _kind(case, b) == RS_KIND or scaled is None or scaled.target != "aten.mul.Tensor" or len(scaled.args) != 2 \
            or not isinstance(scaled.args[1], NodeRef):
        return None
    name = edit.fresh_name(graph, f"{a}_{suffix}")
    gain = scaled.args[1]
    graph = edit.insert_before(graph, scaled.name, [edit.call(name, target, *(gain if arg is None else arg for arg in args),
                                                              meta=_phase(case, a))])
    return replace(case, graph=edit.update_node(graph, scaled.name, args=(scaled.args[0], NodeRef(name))))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_through_opaque_op(case: Case, a: str, b: str) -> Optional[Case]:
    """A's scaled cast takes its 0-dim gain through relu: still 0-dim, so torch keeps the cast's dtype;
    a walk that leaves a 0-dim op's result unknown falls back to the parameter's."""
    return _gain_replaced(case, a, b, "aten.relu.default", "gain", None)


@reannotating
@needs_cast()
@acts_on(*AG_KINDS)
def cast_beside_opaque_op(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers an op the dtype walk does not know (relu of the parameter) plus its cast: torch
    promotes the dimensioned sum to the parameter's dtype. A walk that takes the unknown op for a
    0-dim result of its input keeps the cast's dtype instead."""
    cast = _cast_source(case, a, computed=True)
    if _kind(case, b) == RS_KIND or cast is None or not isinstance(cast.args[0], NodeRef):
        return None
    graph, meta = case.graph, _phase(case, a)
    opaque, total = edit.fresh_name(graph, f"{a}_opaque"), edit.fresh_name(graph, f"{a}_beside")
    # the cast is the sum's second operand: its input is known by the time the unknown op is read
    graph = edit.insert_after(graph, cast.name, [edit.call(opaque, "aten.relu.default", cast.args[0], meta=meta),
                                                 edit.call(total, "aten.add.Tensor", NodeRef(opaque),
                                                           NodeRef(cast.name), meta=meta)])
    return replace(case, graph=edit.update_node(graph, a, args=(NodeRef(total), *graph.node(a).args[1:])))


@reannotating
@needs_cast()
@acts_on(*AG_KINDS)
def cast_before_opaque_op(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers its cast plus relu of the parameter, the cast first: torch promotes the sum to the
    parameter's dtype whichever operand comes first; a walk that gives arithmetic its first
    operand's dtype keeps the cast's."""
    planted = cast_beside_opaque_op(case, a, b)
    if planted is None:
        return None
    total = next(n for n in planted.graph.nodes if n.target == "aten.add.Tensor" and n.name.startswith(f"{a}_beside"))
    return replace(planted, graph=edit.update_node(planted.graph, total.name, args=total.args[::-1]))


@needs_cast()
@acts_on(*AG_KINDS)
def cast_through_keyword_op(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers ``gelu(cast, approximate="tanh")``: an op with a keyword the walk must pass through
    unchanged when it runs the op on stand-ins; gelu keeps the cast's dtype."""
    return _cast_through(case, a, b, "aten.gelu.default", "gelu", approximate="tanh")


@needs_cast()
@acts_on(*AG_KINDS)
def cast_copied_to_device(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers ``_to_copy(cast, device="cpu")``, a copy to the device the ranks run on (an offloaded
    shard is copied to the device before its gather): the cast's dtype. Run on meta stand-ins, the
    copy must go to meta too: a copy out of a meta tensor fails, and the walk falls back to the
    parameter's dtype. Built graphs name keywords by new strings, as loaded ones do, so a walk that
    finds ``device`` by identity misses it."""
    return _cast_through(case, a, b, "aten._to_copy.default", "copied", device="cpu")


@needs_cast()
@acts_on(*AG_KINDS)
def cast_moved_by_device_object(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers ``_to_copy(cast, device=torch.device("cpu"))``: the same move as a traced graph
    writes it (make_fx records ``.to(device)`` with a device object, never its string), the cast's
    dtype. A walk that refuses every device object leaves it unknown and falls back to the
    parameter's dtype."""
    return _cast_through(case, a, b, "aten._to_copy.default", "moved", device=torch.device("cpu"))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def cast_scaled_by_product(case: Case, a: str, b: str) -> Optional[Case]:
    """A's scaled cast is scaled by its gain squared: a product of two 0-dim float32 values is 0-dim,
    so torch keeps the cast's dtype; a walk that takes every product for dimensioned gets float32."""
    return _gain_replaced(case, a, b, "aten.mul.Tensor", "gain_squared", None, None)


def _scaled(case: Case, a: str, b: str) -> Optional[tuple[NodeSpec, NodeSpec, NodeSpec]]:
    """A's scaled cast as drawn: ``mul(cast, gain)`` with ``gain = convert(amax(abs(p), []), f32)``
    (the product, the gain, the amax); None where A gathers no such product."""
    graph = case.graph
    source = graph.node(a).args[0]
    scaled = graph.node(source.name) if isinstance(source, NodeRef) else None
    if _kind(case, b) == RS_KIND or scaled is None or scaled.target != "aten.mul.Tensor" or len(scaled.args) != 2 \
            or not all(isinstance(arg, NodeRef) for arg in scaled.args):
        return None
    gain = graph.node(scaled.args[1].name)
    amax = graph.node(gain.args[0].name) if gain.args and isinstance(gain.args[0], NodeRef) else None
    if gain.target != CAST or amax is None or amax.target != "aten.amax.default" or not isinstance(amax.args[0], NodeRef):
        return None
    return scaled, gain, amax


def _scaled_param(case: Case, found: Optional[tuple]) -> tuple[Optional[NodeSpec], Optional[ParamSpec]]:
    """The cast of a scaled cast ``found`` by ``_scaled`` and the parameter it casts (None each where
    there is none)."""
    cast = case.graph.node(found[0].args[0].name) if found else None
    param = next((p for p in case.graph.params if cast is not None and cast.args
                  and cast.args[0] == NodeRef(p.placeholder)), None)
    return cast, param


def _gain_reduced(case: Case, a: str, b: str, *args: Any, target: Optional[str] = None,
                  kwargs: Optional[dict] = None) -> Optional[Case]:
    """A's scaled cast with its gain's reduction (``amax(abs(p), [])`` as drawn) called on the same
    input with ``args`` after it, as ``target`` and with ``kwargs`` where given; None where A gathers
    no such product."""
    found = _scaled(case, a, b)
    if found is None:
        return None
    amax = found[2]
    return replace(case, graph=edit.update_node(case.graph, amax.name, target=target, args=(amax.args[0], *args),
                                                kwargs=kwargs))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def scaled_cast_partly_traced(case: Case, a: str, b: str) -> Optional[Case]:
    """A's scaled cast in a graph a tracer saw and a later pass edited: the cast and its 0-dim gain
    carry traced values (``meta["val"]``), their product (the pass's node) none. torch keeps the
    cast's dtype, the gain being 0-dim; a walk that misreads a traced value's rank gets float32."""
    found = _scaled(case, a, b)
    graph = case.graph
    cast, param = _scaled_param(case, found)
    if cast is None or cast.target != CAST or len(cast.args) != 2 or param is None \
            or not isinstance(cast.args[1], torch.dtype):
        return None
    graph = edit.update_node(graph, cast.name, meta={TRACED: {"dtype": DTYPE_NAMES[cast.args[1]],
                                                              "shape": list(param.shard_shape)}})
    return replace(case, graph=edit.update_node(graph, found[1].name,
                                                meta={TRACED: {"dtype": "float32", "shape": []}}))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_summed_with_dtype(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is ``sum(abs(p), dtype=float32)``: a full reduction naming its dtype by keyword, 0-dim,
    so torch keeps the cast's dtype; a walk that leaves a reduction with keywords unknown falls back
    to the parameter's dtype, and one that reads any ``dtype`` keyword as a cast keeps its input's rank."""
    found = _scaled(case, a, b)
    if found is None:
        return None
    scaled, _, amax = found
    graph = case.graph
    name = edit.fresh_name(graph, f"{a}_gain_summed")
    graph = edit.insert_before(graph, scaled.name, [edit.call(name, "aten.sum.default", amax.args[0],
                                                              meta=_phase(case, a), dtype=torch.float32)])
    return replace(case, graph=edit.update_node(graph, scaled.name, args=(scaled.args[0], NodeRef(name))))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_by_bare_reduction(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain reduces with ``amax(x)``, its dims left to their default (every dim), not ``amax(x, [])``:
    the same 0-dim result."""
    return _gain_reduced(case, a, b)


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_by_keyword_reduction(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain reduces with ``amax(x, dim=[], keepdim=False)``, its dims by keyword: the same 0-dim
    result, but one the walk can only get by running amax, and amax refuses an empty input, so a
    walk whose stand-ins hold no element leaves the gain unknown."""
    return _gain_reduced(case, a, b, kwargs={"dim": [], "keepdim": False})


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_by_positional_keepdim(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain reduces with ``amax(x, [], False)``, keepdim by position: the same 0-dim result."""
    return _gain_reduced(case, a, b, [], False)


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_summed_with_every_keyword(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is ``sum(x, dim=[], keepdim=False, dtype=float32)``, every argument by keyword (the
    ``dim_IntList`` overload): the same 0-dim result."""
    return _gain_reduced(case, a, b, target="aten.sum.dim_IntList",
                         kwargs={"dim": [], "keepdim": False, "dtype": torch.float32})


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_by_mean(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is ``mean(abs(p))`` (an absmean scale, as ternary and 1-bit weight recipes use): a
    reduction over every dim that no table of the walk names, 0-dim, so torch keeps the cast's dtype."""
    return _gain_reduced(case, a, b, target="aten.mean.default")


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_by_standard_deviation(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is ``std(abs(p), correction=0)`` (a scale from the weights' spread): a full reduction
    with a keyword the walk must hand over as it is, 0-dim, so torch keeps the cast's dtype."""
    return _gain_reduced(case, a, b, target="aten.std.correction", kwargs={"correction": 0})


@reannotating
@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_indexed_by_python(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is ``amax(abs(p), [0], True)[0]`` with Python's indexing (``operator.getitem``, as a
    symbolic trace records ``t[0]``): the per-column scales' one row, 0-dim for a 1-D shard and
    dimensioned for a wider one, so A moves the cast's dtype or float32 by the shard's rank."""
    return _per_column_gain_through(case, a, b, "indexed", "operator.getitem", 0)


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_of_python_negation(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain reduces ``-abs(p)`` negated by Python's ``-`` (``operator.neg``, as a symbolic trace
    records it): still a reduction over every dim, 0-dim, so torch keeps the cast's dtype. The walk
    follows the negation by its name but cannot run it on the real shard shape, so only the
    stand-ins can say the reduction is full; a walk that also asks the real shapes falls back to the
    parameter's dtype."""
    found = _scaled(case, a, b)
    if found is None:
        return None
    amax = found[2]
    graph = case.graph
    name = edit.fresh_name(graph, f"{a}_negated")
    graph = edit.insert_before(graph, amax.name, [edit.call(name, "operator.neg", amax.args[0], meta=_phase(case, a))])
    return replace(case, graph=edit.update_node(graph, amax.name, args=(NodeRef(name), *amax.args[1:])))


@reannotating
@needs_cast(scaled=True, rows=Rows.WIDE)
@acts_on(*AG_KINDS)
def gain_per_channel(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is per column, ``sum(abs(p), [0])`` of a 2-D or wider shard: dimensioned, so torch
    promotes the product to float32 and A moves float32, though its cast is half precision. A walk
    that takes a reduction's 0-dim result on one-element stand-ins for a reduction over every dim
    packs A in the cast's dtype, rounding it."""
    param = _scaled_param(case, _scaled(case, a, b))[1]
    if param is None or len(param.shard_shape) < 2:
        return None
    return _gain_reduced(case, a, b, [0], target="aten.sum.dim_IntList")


@reannotating
@needs_cast(scaled=True, rows=Rows.WIDE)
@acts_on(*AG_KINDS)
def gain_squeezed_per_channel(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is ``squeeze_copy(amax(abs(p), [0], True))`` (a functionalized graph's squeeze) of a
    shard with more than one element per row: dimensioned, so A moves float32. The squeeze drops only
    dims of one element, so it comes out 0-dim from one-element stand-ins; only stand-ins whose dims
    hold two elements show that it keeps the rest."""
    param = _scaled_param(case, _scaled(case, a, b))[1]
    return None if param is None or not Rows.WIDE.fits(param.shard_shape) else _squeezed_gain(case, a, b)


@needs_cast(scaled=True, rows=Rows.SINGLE)
@acts_on(*AG_KINDS)
def gain_squeezed_to_a_scalar(case: Case, a: str, b: str) -> Optional[Case]:
    """As ``gain_squeezed_per_channel``, of a shard whose rows hold one element each: the squeeze
    drops every dim, so the gain is 0-dim and the product keeps the cast's half precision. Stand-ins
    cannot tell the two apart (the squeeze keeps or drops dims by the real sizes); a walk that takes
    the open rank for dimensioned hands the member back in float32."""
    param = _scaled_param(case, _scaled(case, a, b))[1]
    return None if param is None or not Rows.SINGLE.fits(param.shard_shape) else _squeezed_gain(case, a, b)


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_of_a_dynamic_neighbour(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is ``squeeze_copy(amax(abs(q), [0], True))`` of B's parameter q (one scale for two
    weights), whose gathers name a symbolic shard shape (a dynamic-shape trace; rule 8 skips them).
    Their spec names q's dtype but no shard shape, so the gain's rank stays open to the walk, which
    takes it for dimensioned (as a shard is): A moves float32. A walk that takes a parameter known by
    dtype alone for one known by shape too raises on every such graph.

    The walk can only guess the open rank (dimensioned, as a shard is), so q's rows hold several
    elements (the squeeze keeps a dim: the guess is right), and A's parameter is gathered again in
    the backward, whose own cast its gradient reads: the forward product turns float32 here, and
    a gradient of it would no longer be the dtype its reduce-scatter's spec names."""
    found = _scaled(case, a, b)
    abs_of = case.graph.node(found[2].args[0].name) if found else None
    neighbour = case.graph.node(b).meta.get("param_node")
    shard = next((p.shard_shape for p in case.graph.params if p.placeholder == neighbour), ())
    own = case.graph.node(a).meta.get("param_node")
    # A is a forward gather: a backward one's product is what the gradient reads
    again = case.graph.node(a).meta.get("comm_type") != "fsdp_all_gather_backward" and any(
        n.meta.get("param_node") == own and n.meta.get("comm_type") == "fsdp_all_gather_backward"
        for n in case.graph.nodes)
    if abs_of is None or abs_of.target != "aten.abs.default" or not isinstance(neighbour, str) \
            or abs_of.args[0] == NodeRef(neighbour) or not Rows.WIDE.fits(tuple(shard)) or not again:
        return None
    planted = _squeezed_gain(replace(case, graph=edit.update_node(case.graph, abs_of.name,
                                                                  args=(NodeRef(neighbour),))), a, b)
    for node in planted.graph.nodes:
        shape = (node.meta.get("fsdp_bucket_spec") or {}).get("input_shape")
        if node.meta.get("param_node") == neighbour and node.meta.get("comm_type") in AG_KINDS and shape:
            planted = _spec_meta(planted, node.name, input_shape=(*tuple(shape)[:-1], "s0"))
    return planted


def _squeezed_gain(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain as ``squeeze_copy(amax(abs(p), [0], True))``."""
    return _per_column_gain_through(case, a, b, "squeezed", "aten.squeeze_copy.default")


def _per_column_gain_through(case: Case, a: str, b: str, suffix: str, target: str, *args: Any) -> Optional[Case]:
    """A's gain as ``target(amax(abs(p), [0], True), *args)``: the per-column scales through one op."""
    planted = _gain_reduced(case, a, b, [0], True)
    if planted is None:
        return None
    gain = _scaled(planted, a, b)[1]
    amax = gain.args[0]
    graph = planted.graph
    name = edit.fresh_name(graph, f"{a}_{suffix}")
    graph = edit.insert_after(graph, amax.name, [edit.call(name, target, amax, *args, meta=_phase(case, a))])
    return replace(planted, graph=edit.update_node(graph, gain.name, args=(NodeRef(name), *gain.args[1:])))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_all_reduced(case: Case, a: str, b: str) -> Optional[Case]:
    """A's gain is all-reduced (max) over A's group before it scales the cast, as float8 training
    syncs a weight's amax over the ranks that shard it: a 0-dim float32 value through a collective
    and its wait, so torch keeps the cast's dtype. A walk that stops at a collective falls back to
    the parameter's dtype."""
    found = _scaled(case, a, b)
    if found is None:
        return None
    scaled, gain, _ = found
    graph = case.graph
    nodes = _all_reduced(edit.fresh_name(graph, f"{a}_gain_synced"), NodeRef(gain.name), "max",
                         graph.node(a).args[-1], _phase(case, a))
    graph = edit.insert_before(graph, scaled.name, nodes)
    return replace(case, graph=edit.update_node(graph, scaled.name, args=(scaled.args[0], NodeRef(nodes[-1].name))))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_as_constant(case: Case, a: str, b: str) -> Optional[Case]:
    """A's scaled cast takes a constant gain, ``scalar_tensor(0.5, dtype=float32, device=...)`` as a
    traced ``torch.tensor(0.5)`` writes it: a factory with no tensor input, 0-dim, so torch keeps the
    cast's dtype. A walk that runs only ops with a tensor input falls back to the parameter's."""
    return _gain_from_factory(case, a, b, "constant_gain", "aten.scalar_tensor.default", 0.5, dtype=torch.float32,
                              device=torch.device("cpu"))


def _gain_from_factory(case: Case, a: str, b: str, suffix: str, target: str, *args: Any,
                       **kwargs: Any) -> Optional[Case]:
    """A's scaled cast times a factory's result (``target(*args, **kwargs)``) in place of its gain."""
    found = _scaled(case, a, b)
    if found is None:
        return None
    scaled = found[0]
    graph = case.graph
    name = edit.fresh_name(graph, f"{a}_{suffix}")
    graph = edit.insert_before(graph, scaled.name, [edit.call(name, target, *args, meta=_phase(case, a), **kwargs)])
    return replace(case, graph=edit.update_node(graph, scaled.name, args=(scaled.args[0], NodeRef(name))))


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def gain_drawn_without_device(case: Case, a: str, b: str) -> Optional[Case]:
    """A's scaled cast takes a random gain a graph pass wrote by hand, ``randint(1, 9, [],
    dtype=float32)`` with no device keyword (the factory's default device; a trace always names one):
    0-dim, so torch keeps the cast's dtype. A walk that runs factories only where the node names a
    device leaves the gain unknown (A moves in the spec dtype); one that runs this factory on the real
    device draws from the global generator and moves every random number the step draws after it."""
    return _gain_from_factory(case, a, b, "random_gain", "aten.randint.low", 1, 9, [], dtype=torch.float32)


@needs_cast(scaled=True)
@acts_on("fsdp_all_gather")
def gains_drawn_in_both_phases(case: Case, a: str, b: str) -> Optional[Case]:
    """As ``gain_drawn_without_device``, for A's forward gather and its backward one (each casts
    afresh): two random ops on every rank, drawn in graph order. A rewrite that moves one past the
    other deals each rank's numbers to the other gain."""
    own = case.graph.node(a).meta.get("param_node")
    again = next((n.name for n in case.graph.nodes if n.meta.get("param_node") == own
                  and n.meta.get("comm_type") == "fsdp_all_gather_backward"), None)
    planted = gain_drawn_without_device(case, a, b)
    return None if planted is None or again is None else gain_drawn_without_device(planted, again, b)


@needs_cast(scaled=True)
@acts_on(*AG_KINDS)
def cast_scaled_by_python_operator(case: Case, a: str, b: str) -> Optional[Case]:
    """A's scaled cast multiplies with ``operator.mul``, as a symbolic trace records ``cast * gain``:
    the same promotion as ``aten.mul.Tensor``."""
    found = _scaled(case, a, b)
    if found is None:
        return None
    return replace(case, graph=edit.update_node(case.graph, found[0].name, target="operator.mul"))


@needs_cast()
@acts_on(*AG_KINDS)
def cast_through_opaque_packet(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers relu of its cast called as the packet ``aten.relu`` (the FSDP pass calls packets), not
    its overload: the walk runs it on stand-ins all the same."""
    planted = cast_through_opaque_op(case, a, b)
    if planted is None:
        return None
    opaque = next(n for n in planted.graph.nodes if n.target == "aten.relu.default" and n.name.startswith(f"{a}_opaque"))
    return replace(planted, graph=edit.update_node(planted.graph, opaque.name, target="aten.relu"))


@needs_cast()
@acts_on(*AG_KINDS)
def cast_of_unfollowable_value(case: Case, a: str, b: str) -> Optional[Case]:
    """A's cast reads ``cat([p])``, a value the dtype walk cannot follow (it reads a list of tensors):
    the cast still decides what A moves."""
    cast = _cast_source(case, a)
    if _kind(case, b) == RS_KIND or cast is None or not isinstance(cast.args[0], NodeRef):
        return None
    graph = case.graph
    name = edit.fresh_name(graph, f"{a}_unfollowable")
    graph = edit.insert_before(graph, cast.name, [edit.call(name, "aten.cat.default", [cast.args[0]], 0,
                                                            meta=_phase(case, a))])
    return replace(case, graph=edit.update_node(graph, cast.name, args=(NodeRef(name), *cast.args[1:])))


@needs_cast()
@acts_on(*AG_KINDS)
def opaque_op_of_unfollowable_cast(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers relu of its cast of ``cat([p])``: the walk can neither follow the cast's input nor run
    relu on real shapes, yet the cast decides the dtype and relu keeps it, so the stand-ins' answer
    (dimensioned, the cast's dtype) is the answer. A walk that asks the real shapes of every result
    with a dimensioned input, not only of a 0-dim one, packs A in the parameter's dtype."""
    planted = cast_of_unfollowable_value(case, a, b)
    return None if planted is None else cast_through_opaque_op(planted, a, b)


@needs_cast(pair=Cast.PAIR)
@acts_on(*AG_KINDS)
def every_member_cast(case: Case, a: str, b: str) -> Optional[Case]:
    """A and B each gather their own cast (a packed uint8 weight beside a half-precision one): no
    member moves the parameters' dtype, so the wire is the narrowest dtype that holds both. The
    shape is the blueprint's; this only picks the pair."""
    dtypes = _cast_dtypes(case, a, b)
    return case if dtypes is not None and dtypes[0] != dtypes[1] else None


def _cast_dtypes(case: Case, a: str, b: str) -> Optional[tuple[Any, Any]]:
    """What A's and B's gathered casts cast to, for two all-gathers that each gather a cast; else None."""
    casts = [_cast_source(case, launch) for launch in (a, b)]
    if _kind(case, b) == RS_KIND or any(cast is None for cast in casts):
        return None
    return casts[0].args[1], casts[1].args[1]


@needs_cast(pair=Cast.WIDE_PAIR)
@acts_on(*AG_KINDS)
@gathered_ahead  # the pair's forward gathers then sit side by side, so they fuse whatever their casts
def wide_integer_beside_half(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers an int32 cast (4-bit weights packed eight to a word) and B a half-precision one:
    the wire must hold every int32 beside B's values, which only float64 does (an integer bound
    read as "any integer fits a float" rounds A in the half-precision wire)."""
    dtypes = _cast_dtypes(case, a, b)
    return case if dtypes is not None and dtypes[0] == torch.int32 and dtypes[1] in (torch.bfloat16,
                                                                                    torch.float16) else None


@needs_cast(pair=Cast.FLOAT8_VENDORS)
@acts_on(*AG_KINDS)
def two_vendors_float8(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers AMD's float8_e4m3fnuz cast and B the OCP float8_e4m3fn one (a model moved between
    vendors' checkpoints): e4m3fn holds every e4m3fnuz value but those below its own smallest
    subnormal step (2**-9; e4m3fnuz has normals down to 2**-7 and steps of 2**-10), so the wire is
    float16. A hold test that reads the subnormal bound wrong packs both in e4m3fn and rounds A."""
    dtypes = _cast_dtypes(case, a, b)
    return case if dtypes == (torch.float8_e4m3fnuz, torch.float8_e4m3fn) else None


@needs_cast(pair=Cast.FLOAT8_AMD)
@acts_on(*AG_KINDS)
def amd_float8_formats(case: Case, a: str, b: str) -> Optional[Case]:
    """A gathers a float8_e4m3fnuz cast and B a float8_e5m2fnuz one (AMD's two float8 formats): the
    wire is float16. ``torch.finfo(float8_e5m2fnuz).eps`` is 0.125, half the format's own, so a hold
    test that trusts it takes e5m2fnuz (two mantissa bits) for a holder of e4m3fnuz (three)."""
    dtypes = _cast_dtypes(case, a, b)
    return case if dtypes == (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz) else None


VIEW_TARGETS = frozenset({"aten.view", "aten.view.default", "aten.t.default", "aten.transpose.int",
                          "aten.slice.Tensor", "aten.unsqueeze.default"})
FUSION_MUTATIONS: dict[str, tuple[Callable, ...]] = {"view_moved_past_source": (source_after_view,),
                                                      "capacity_exact": (capacity_exact,),
                                                      "input_distance_exact": (input_distance_exact,),
                                                      "anchor_on_foreign_wait": (anchor_on_foreign_wait,),
                                                      "cast_far_up_the_chain": (cast_far_up_the_chain,),
                                                      "cast_scaled_twice": (cast_scaled_twice,
                                                                            cast_scaled_by_product),
                                                      "scaled_cast_forms": (gain_summed_with_dtype,
                                                                            gain_by_bare_reduction,
                                                                            gain_by_keyword_reduction,
                                                                            gain_by_positional_keepdim,
                                                                            gain_summed_with_every_keyword,
                                                                            gain_by_mean,
                                                                            gain_by_standard_deviation,
                                                                            gain_indexed_by_python,
                                                                            gain_of_python_negation,
                                                                            cast_scaled_by_python_operator,
                                                                            gain_as_constant,
                                                                            gain_drawn_without_device,
                                                                            gains_drawn_in_both_phases),
                                                      "per_row_gains": (gain_per_channel, gain_squeezed_per_channel,
                                                                        gain_squeezed_to_a_scalar,
                                                                        gain_of_a_dynamic_neighbour),
                                                      "gain_all_reduced": (gain_all_reduced,),
                                                      "cast_dtype_by_keyword": (cast_dtype_by_keyword, cast_as_to_copy,
                                                                                scaled_cast_as_to_copy),
                                                      "cast_beside_opaque_op": (cast_beside_opaque_op,
                                                                                cast_before_opaque_op,
                                                                                cast_through_opaque_op,
                                                                                cast_through_keyword_op,
                                                                                cast_copied_to_device,
                                                                                cast_moved_by_device_object,
                                                                                gain_through_opaque_op,
                                                                                cast_through_opaque_packet,
                                                                                cast_of_unfollowable_value,
                                                                                opaque_op_of_unfollowable_cast),
                                                      "scaled_cast_partly_traced": (scaled_cast_partly_traced,),
                                                      "every_member_cast": (every_member_cast,
                                                                            wide_integer_beside_half,
                                                                            two_vendors_float8,
                                                                            amd_float8_formats),
                                                      "rs_chain_in_two_pieces": (chain_in_two_pieces,)}


# -- sites ---------------------------------------------------------------------------------

# Variants that only exist for some launch kinds (every other variant fits any launch).
# Reason -> the mutations that plant it, per action, in the order they are defined.
SKIP_MUTATIONS: dict[str, tuple[Callable, ...]] = {r: tuple(v) for r, v in _PLANTED["skip"].items()}
SPLIT_MUTATIONS: dict[str, tuple[Callable, ...]] = {r: tuple(v) for r, v in _PLANTED["split"].items()}
SINGLETON_MUTATIONS: dict[str, tuple[Callable, ...]] = {r: tuple(v) for r, v in _PLANTED["singleton"].items()}


def fits(variant: Callable, case: Case, site: str | tuple[str, str]) -> bool:
    """Whether ``variant`` can act on ``site`` (some defects only exist for some launch kinds). A
    launch the spec annotator left without a bucket spec (a one-rank group's) is no site: the planner
    skips it before any planted defect could show; so is a launch nothing reads (``launch_without_users``)."""
    launch = site[-1] if isinstance(site, tuple) else site
    read = edit.read_names(case.graph)
    if not all("fsdp_bucket_spec" in case.graph.node(n).meta and n in read
               for n in (site if isinstance(site, tuple) else (site,))):
        return False
    kinds = getattr(variant, "acts_on", None)
    return kinds is None or _kind(case, launch) in kinds


def _site_key(node: NodeSpec) -> tuple:
    name = node.meta.get("param_name") or ""
    spec = node.meta.get("fsdp_bucket_spec") or {}
    reduce_op = node.args[1] if node.meta.get("comm_type") == RS_KIND and len(node.args) > 1 else None
    return (node.meta.get("comm_type"), bool(node.meta.get("autograd_backward")), name.rpartition(".")[0],
            node.args[-1] if node.args else None, str(spec.get("dtype")), reduce_op)


def launches(spec: GraphSpec) -> list[str]:
    """Every tagged call (a tagged placeholder is no launch): the sites of skip mutations."""
    return [node.name for node in edit.tagged_launches(spec) if node.op == "call_function"]


def sibling_pairs(spec: GraphSpec) -> list[tuple[str, str]]:
    """Consecutive launches that look compatible (same kind, phase, scope, group, dtype, op)."""
    last: dict[tuple, str] = {}
    pairs = []
    for node in edit.tagged_launches(spec):
        if node.op != "call_function":
            continue
        key = _site_key(node)
        if key in last:
            pairs.append((last[key], node.name))
        last[key] = node.name
    return pairs


# -- broken planner arguments (input-validation paths, spec 2.1-2.3) ------------------------

ARG_MUTATIONS: dict[str, dict] = {
    "group_ranks_duplicate": {"group_ranks": {"fsdp": (0, 0)}},
    "group_ranks_negative": {"group_ranks": {"fsdp": (-1, 0)}},
    "group_ranks_bool": {"group_ranks": {"fsdp": (True, 1)}},
    "group_ranks_empty": {"group_ranks": {"fsdp": ()}},
    "module_plans_str": {"module_bucket_plans": "blocks.0"},
    "module_plans_empty_group": {"module_bucket_plans": [[]]},
    "module_plans_wildcard": {"module_bucket_plans": ["blocks.*"]},
    "module_plans_empty_part": {"module_bucket_plans": ["blocks..0"]},
    "module_plans_whitespace": {"module_bucket_plans": ["blocks. 0"]},
    "module_plans_trailing_space": {"module_bucket_plans": ["blocks.0 "]},  # a check of leading space only passes it
    "module_plans_overlap": {"module_bucket_plans": ["blocks", "blocks.0"]},
    "module_plans_not_str": {"module_bucket_plans": [["blocks.0", 7]]},
    "policy_cap_zero": {"policy": {"cap_bytes": 0}},
    "policy_bool": {"policy": {"max_input_distance": True}},
    "policy_negative": {"policy": {"max_consumer_distance": -1}},
    "policy_input_negative": {"policy": {"max_input_distance": -1}},
}
