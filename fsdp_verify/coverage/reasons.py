"""Reason coverage: which planner decisions, and which branch of each, a strategy reaches.

Every generated case is planned on its first rank; each decision is counted under its reason and
under the sub-condition that explains it (``subconditions.classify``), and the parallel-mode
arguments drawn are tallied, so a generator that only ever trips one branch of a rule shows up.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import hypothesis
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from fsdp_verify.model import spec_params
from fsdp_verify.model.case import Case
from fsdp_verify.checks.identity import CAST_TARGETS, capacity, cast_dtype
from fsdp_verify.graph import collectives
from fsdp_verify.graph.ops import PYTHON_OPERATORS, resolve_target
from fsdp_verify.graph.spec import TRACED, padded_casts
from fsdp_verify.graph.values import SpecError
from fsdp_verify.graph.builder import build_module, localize
from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.strategies.graphs import DEGREES
from fsdp_verify.strategies.mutations import DP_MODES, PP_DEGREES
from fsdp_verify.strategies.target_options import with_target_options
from fsdp_verify.targets import get_target
from fsdp_verify.coverage.subconditions import SUBCONDITIONS, Site, classify

ACTIONS = ("skip", "split", "singleton")
# The parallel-mode arguments every run must draw: the default and each value the mutations plant.
PARALLEL_VALUES = {"pp_degree": (1, *PP_DEGREES), "dp_mode": ("fsdp", *DP_MODES)}
# Every group degree the strategies draw (world sizes of the cases): a rule right only on powers
# of two needs the others.
WORLD_SIZES = tuple(sorted(set(DEGREES)))
# Shapes a bug class hides in, each counted per case that has it.
FEATURES = ("prefix_sharing_scopes", "dependent_candidates", "mutating_ops_in_spans", "non_contiguous_sources",
            "wrapped_codes", "low_precision_gathers", "mixed_dtype_gathers", "scaled_casts",
            "schemaless_consumers", "interleaved_gathers", "far_casts", "twice_scaled_casts", "keyword_casts",
            "casts_beside_opaque_ops", "synced_gains", "partly_traced_sources", "uneven_shards", "padded_casts",
            "one_rank_groups", "groups_of_one_size")


def _prefix_sharing(case: Case) -> bool:
    """Two parameters' modules of which one FQN is a prefix of the other without a dot boundary."""
    scopes = sorted({param.fqn.rsplit(".", 1)[0] for param in case.graph.params})
    return any(b.startswith(a) and not b.startswith(a + ".") for a in scopes for b in scopes if a != b)


def _dependent_candidates(case: Case) -> bool:
    """A collective whose source is computed from another collective of its kind (after that one's
    wait): the dependency window's boundary, where a bucket of both would wait on itself."""
    nodes = {node.name: node for node in case.graph.nodes}
    launches = [n for n in case.graph.nodes if collectives.is_launch(n.target) and n.inputs()]
    waited = {w.inputs()[0]: w.name for w in case.graph.nodes if collectives.is_wait(w.target) and w.inputs()}
    for launch in launches:
        kind, seen, todo = collectives.kind(launch.target), set(), [launch.inputs()[0]]
        while todo:
            name = todo.pop()
            if name in seen or name not in nodes:
                continue
            seen.add(name)
            todo.extend(nodes[name].inputs())
        if any(waited.get(other.name) in seen for other in launches
               if other is not launch and collectives.kind(other.target) == kind):
            return True
    return False


def _writes(target: str) -> bool:
    """Whether the op's schema writes an argument (an in-place or ``out=`` variant)."""
    try:
        op = resolve_target(target)
    except SpecError:
        return False
    schema = getattr(op, "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _mutating_ops_in_spans(case: Case) -> bool:
    """An in-place or ``out=`` op between two launches of one collective kind: the span a bucket of
    both would cross, where the write must split it."""
    launches: dict[str, list[int]] = {}
    for index, node in enumerate(case.graph.nodes):
        if collectives.is_launch(node.target):
            launches.setdefault(collectives.kind(node.target), []).append(index)
    return any(node.op == "call_function" and node.target and _writes(node.target)
               and any(at[0] < index < at[-1] for at in launches.values())
               for index, node in enumerate(case.graph.nodes))


_TRANSPOSES = frozenset({"aten.transpose.int", "aten.t.default", "aten.permute.default"})


def _non_contiguous_sources(case: Case) -> bool:
    """An all-gather whose source is a transposed layout of a shard with two dims over one."""
    nodes = {node.name: node for node in case.graph.nodes}
    for node in case.graph.nodes:
        if collectives.kind(node.target) is collectives.Kind.ALL_GATHER and node.inputs():
            source = nodes.get(node.inputs()[0])
            spec = node.meta.get("fsdp_bucket_spec")
            shape = spec.get("input_shape") if isinstance(spec, dict) else None
            # Skip variants plant malformed metadata on purpose: a shape that is not a list of
            # ints is not this feature, whatever else it is.
            if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
                continue
            if source is not None and source.target in _TRANSPOSES and len(shape) >= 2 and min(shape[:2]) > 1:
                return True
    return False


def _wrapped_codes(case: Case) -> bool:
    """A reduce-scatter whose source has more elements than its dtype's exact sum span: its
    identity codes repeat, and the layout checker needs its second coded run."""
    for node in case.graph.nodes:
        spec = node.meta.get("fsdp_bucket_spec")
        if collectives.kind(node.target) is not collectives.Kind.REDUCE_SCATTER or not isinstance(spec, dict):
            continue
        shape, dtype, degree = spec.get("input_shape"), spec.get("dtype"), node.meta.get("fsdp_degree")
        if isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape) \
                and isinstance(dtype, torch.dtype) and isinstance(degree, int) and degree > 0 \
                and math.prod(shape) > capacity("fsdp_reduce_scatter", dtype, degree):
            return True
    return False


# Arithmetic a gather source may apply to a cast (a gain); the 0-dim factor keeps the cast's dtype.
# Arithmetic a gather source may be, as aten writes it or as a symbolic trace records Python's operators.
_ARITHMETIC = frozenset({"aten.mul.Tensor", "aten.add.Tensor", "aten.sub.Tensor", "aten.div.Tensor",
                         "operator.mul", "operator.add", "operator.sub", "operator.truediv"})


def _moved_dtypes(case: Case) -> dict[tuple, set]:
    """All-gathers that one bucket could hold (kind, group, the spec's dtype) -> the dtypes their
    sources hold: a cast before the gather moves the cast's dtype (a low-precision all-gather)."""
    nodes = {node.name: node for node in case.graph.nodes}
    moved: dict[tuple, set] = {}
    for node in case.graph.nodes:
        spec = node.meta.get("fsdp_bucket_spec")
        if collectives.kind(node.target) is not collectives.Kind.ALL_GATHER or not node.inputs() \
                or not isinstance(spec, dict):
            continue
        source, dtype = nodes.get(node.inputs()[0]), spec.get("dtype")
        if source is not None and source.target in _ARITHMETIC:  # a scaled cast moves the cast's dtype
            source = next((nodes[i] for i in source.inputs() if i in nodes and nodes[i].target in CAST_TARGETS),
                          source)
        if source is not None and cast_dtype(source) is not None:
            dtype = cast_dtype(source)
        key = (node.meta.get("comm_type"), node.meta.get("comm_group"), str(spec.get("dtype")))
        moved.setdefault(key, set()).add(dtype)
    return moved


def _low_precision_gathers(case: Case) -> bool:
    """An all-gather that moves a cast of its parameter (another dtype than the spec's)."""
    return any(len(dtypes - {_dtype_named(key[2])}) for key, dtypes in _moved_dtypes(case).items())


def _mixed_dtype_gathers(case: Case) -> bool:
    """All-gathers one bucket could hold that move different dtypes: its copy-in must keep each."""
    return any(len(dtypes) > 1 for dtypes in _moved_dtypes(case).values())


def _gathered_sources(case: Case) -> list:
    """The nodes all-gathers read (their sources), where they are nodes of the graph."""
    nodes = {node.name: node for node in case.graph.nodes}
    return [nodes[node.inputs()[0]] for node in case.graph.nodes
            if collectives.kind(node.target) is collectives.Kind.ALL_GATHER and node.inputs()
            and node.inputs()[0] in nodes]


def _keyword_casts(case: Case) -> bool:
    """An all-gather of a cast that names its dtype by keyword (``convert_element_type(x, dtype=...)``)."""
    return any(source.target in CAST_TARGETS and len(source.args) < 2 and "dtype" in source.kwargs
               for source in _gathered_sources(case))


# An op the reference's dtype walk has no table entry for (it runs such ops on stand-ins); the draws use it.
# Ops the dtype walk follows only by running them (relu, as an overload or as its packet; gelu with
# its keyword; a squeeze of a gain) or not at all (cat reads a list of tensors: a cast of it decides
# the dtype alone).
_OPAQUE = frozenset({"aten.relu.default", "aten.relu", "aten.cat.default", "aten.gelu.default",
                     "aten.squeeze_copy.default"})


def _casts_beside_opaque_ops(case: Case) -> bool:
    """An all-gather of a low-precision cast whose source passes through an op outside the casts,
    views and arithmetic (relu of the cast, of the parameter beside the cast, or of a gain): its
    dtype is known only by running the op as torch would."""
    nodes = {node.name: node for node in case.graph.nodes}
    for source in _gathered_sources(case):
        near, todo = set(), [(source.name, 0)]
        while todo:  # the source and what it reads, two steps up
            name, depth = todo.pop()
            if name in nodes and name not in near:
                near.add(name)
                todo += [(i, depth + 1) for i in nodes[name].inputs()] if depth < 2 else []
        targets = {nodes[name].target for name in near}
        if targets & _OPAQUE and targets & set(CAST_TARGETS):
            return True
    return False


def _synced_gains(case: Case) -> bool:
    """An all-gather of arithmetic on a cast whose other operand is a collective's result (a gain
    all-reduced over the group): what it moves is known only by following the collective."""
    nodes = {node.name: node for node in case.graph.nodes}
    for source in _gathered_sources(case):
        if source.target not in _ARITHMETIC:
            continue
        operands = [nodes[i] for i in source.inputs() if i in nodes]
        if any(n.target in CAST_TARGETS for n in operands) and any(collectives.is_wait(n.target) for n in operands):
            return True
    return False


def _scaled_casts(case: Case) -> bool:
    """An all-gather whose source is arithmetic on a cast (a low-precision gather scaled by a gain):
    its dtype is what torch's promotion rules make of the cast and the other operand."""
    nodes = {node.name: node for node in case.graph.nodes}
    for node in case.graph.nodes:
        if collectives.kind(node.target) is not collectives.Kind.ALL_GATHER or not node.inputs():
            continue
        source = nodes.get(node.inputs()[0])
        if source is not None and source.target in _ARITHMETIC and \
                any(nodes[i].target in CAST_TARGETS for i in source.inputs() if i in nodes):
            return True
    return False


def _schemaless_consumers(case: Case) -> bool:
    """A collective's result read by a call with no operator schema (Python's ``-``, ``+``, ``*``,
    as a symbolic trace records them): a view test that passes through it loses a consumer."""
    waits = {node.name for node in case.graph.nodes if collectives.is_wait(node.target)}
    return any(node.op == "call_function" and node.target in PYTHON_OPERATORS and waits & set(node.inputs())
               for node in case.graph.nodes)


def _interleaved_gathers(case: Case) -> bool:
    """An all-gather waited for only after a later all-gather of another module was issued (a
    prefetch): one bucket's insertion point can then be a wait that another bucket's fusion erases."""
    launched: dict[str, tuple[int, str]] = {}
    for index, node in enumerate(case.graph.nodes):
        if collectives.kind(node.target) is collectives.Kind.ALL_GATHER:
            launched[node.name] = (index, (node.meta.get("param_name") or "").rpartition(".")[0])
        elif collectives.is_wait(node.target) and node.inputs() and node.inputs()[0] in launched:
            at, scope = launched[node.inputs()[0]]
            if any(at < other < index and other_scope != scope for other, other_scope in launched.values()):
                return True
    return False


FAR_STEPS = 32  # a walk bounded at this many steps loses a cast further up


def _far_casts(case: Case) -> bool:
    """An all-gather whose source reaches its cast only through more than FAR_STEPS single-input
    ops: what it moves is decided far up the chain."""
    nodes = {node.name: node for node in case.graph.nodes}
    for node in case.graph.nodes:
        if collectives.kind(node.target) is not collectives.Kind.ALL_GATHER or not node.inputs():
            continue
        current, steps = nodes.get(node.inputs()[0]), 0
        while current is not None and current.target not in CAST_TARGETS and len(current.inputs()) == 1 \
                and steps <= len(nodes):  # a chain is at most the graph long
            current, steps = nodes.get(current.inputs()[0]), steps + 1
        if current is not None and current.target in CAST_TARGETS and steps > FAR_STEPS:
            return True
    return False


def _twice_scaled_casts(case: Case) -> bool:
    """An all-gather whose source is arithmetic on a cast and on further arithmetic (the cast scaled
    twice, or by its gain squared): the result's dtype depends on whether the inner product is 0-dim."""
    nodes = {node.name: node for node in case.graph.nodes}
    for node in case.graph.nodes:
        if collectives.kind(node.target) is not collectives.Kind.ALL_GATHER or not node.inputs():
            continue
        outer = nodes.get(node.inputs()[0])
        if outer is None or outer.target not in _ARITHMETIC:
            continue
        operands = [nodes[i] for i in outer.inputs() if i in nodes]
        inner = [n for n in operands if n.target in _ARITHMETIC]
        casts = [n for n in operands + [i for n in inner for i in (nodes.get(x) for x in n.inputs()) if i is not None]
                 if n.target in CAST_TARGETS]
        if inner and casts:
            return True
    return False


def _padded_casts(case: Case) -> bool:
    """A short rank casts its own rows of a shard, then pads the cast before the gather."""
    return case.graph.uneven and bool(padded_casts(case.graph.nodes, {p.placeholder for p in case.graph.params
                                                                      if p.padding}))


def _partly_traced_sources(case: Case) -> bool:
    """An all-gather whose source has no traced value but reads one that has (a graph a pass edited
    after tracing): the walk reads the traced value's dtype and rank, and computes the rest."""
    traced = {node.name for node in case.graph.nodes if node.meta.get(TRACED) is not None}
    nodes = {node.name: node for node in case.graph.nodes}
    for node in case.graph.nodes:
        source = nodes.get(node.inputs()[0]) if node.inputs() else None
        if collectives.kind(node.target) is collectives.Kind.ALL_GATHER and source is not None and \
                source.name not in traced and any(name in traced for name in source.inputs()):
            return True
    return False


def _groups_of_one_size(case: Case) -> bool:
    """Two groups of one size whose ranks differ, both launched on (a 2-D mesh's two axes): a pass
    that tells groups apart by their size fuses across them."""
    launched = {collectives.group_of(node) for node in case.graph.nodes if collectives.is_launch(node.target)}
    groups = [name for name in case.graph.groups if name in launched]
    return any(case.graph.degree(a) == case.graph.degree(b) and case.graph.groups[a] != case.graph.groups[b]
               for i, a in enumerate(groups) for b in groups[i + 1:])


def _dtype_named(name: str) -> Optional[torch.dtype]:
    value = getattr(torch, name.removeprefix("torch."), None)
    return value if isinstance(value, torch.dtype) else None


def case_features(case: Case) -> Counter:
    """The FEATURES ``case`` has."""
    return Counter(name for name, has in (("prefix_sharing_scopes", _prefix_sharing(case)),
                                          ("dependent_candidates", _dependent_candidates(case)),
                                          ("mutating_ops_in_spans", _mutating_ops_in_spans(case)),
                                          ("non_contiguous_sources", _non_contiguous_sources(case)),
                                          ("wrapped_codes", _wrapped_codes(case)),
                                          ("low_precision_gathers", _low_precision_gathers(case)),
                                          ("mixed_dtype_gathers", _mixed_dtype_gathers(case)),
                                          ("scaled_casts", _scaled_casts(case)),
                                          ("schemaless_consumers", _schemaless_consumers(case)),
                                          ("interleaved_gathers", _interleaved_gathers(case)),
                                          ("far_casts", _far_casts(case)),
                                          ("twice_scaled_casts", _twice_scaled_casts(case)),
                                          ("keyword_casts", _keyword_casts(case)),
                                          ("casts_beside_opaque_ops", _casts_beside_opaque_ops(case)),
                                          ("synced_gains", _synced_gains(case)),
                                          ("partly_traced_sources", _partly_traced_sources(case)),
                                          # ranks whose graphs differ: some pad a short shard
                                          ("uneven_shards", case.graph.uneven),
                                          ("padded_casts", _padded_casts(case)),
                                          # a group of one rank: its launches' degree 1 trips rule 5 alone
                                          ("one_rank_groups", any(case.graph.degree(group) == 1
                                                                  for group in case.graph.groups)),
                                          ("groups_of_one_size", _groups_of_one_size(case)))
                                   if has)


@dataclass
class Reach:
    """What a run of generated cases reached."""

    cases: int = 0
    decisions: Counter = field(default_factory=Counter)  # (action, reason) -> decisions
    subconditions: Counter = field(default_factory=Counter)  # "reason/name" -> decisions
    unexplained: Counter = field(default_factory=Counter)  # (action, reason) no sub-condition explains
    errors: Counter = field(default_factory=Counter)  # argument error message -> cases
    pp_degree: Counter = field(default_factory=Counter)  # repr(value) -> cases
    dp_mode: Counter = field(default_factory=Counter)
    world_size: Counter = field(default_factory=Counter)  # ranks in the case's world -> cases
    features: Counter = field(default_factory=Counter)  # FEATURES -> cases that have it
    options: Counter = field(default_factory=Counter)  # "option=value" of the target's space -> cases
    space: tuple[str, ...] = ()  # every "option=value" of the target's open space
    target: str = "reference"  # the target whose options were drawn
    planner: str = "reference"  # whose planner the decisions are (a target without one: the reference's)

    def add(self, other: "Reach") -> None:
        """Fold ``other`` into this tally."""
        self.cases += other.cases
        for name in ("decisions", "subconditions", "unexplained", "errors", "pp_degree", "dp_mode", "world_size",
                     "features", "options"):
            getattr(self, name).update(getattr(other, name))


def option_key(name: str, value: Any) -> str:
    """How an option's value is counted and named: ``name=repr(value)``."""
    return f"{name}={value!r}"


def _current(plan, previous: str, index: dict, by_name: dict) -> tuple:
    """The members of the bucket a split closed (the one holding ``previous``), in graph order."""
    for bucket in plan.buckets:
        names = [member.launch.name for member in bucket.members]
        if previous in names:
            return tuple(sorted((by_name[n] for n in names), key=index.__getitem__))
    return ()


def case_reach(case: Case, target_name: str = "reference") -> Reach:
    """The decisions of ``case``'s plan on its first rank, each with its sub-condition, under the
    [I] settings the case is judged under (a campaign plans and checks it so)."""
    with spec_params.use(case.spec):
        return _case_reach(case, target_name)


def _case_reach(case: Case, target_name: str) -> Reach:
    reach = Reach(cases=1, pp_degree=Counter([repr(case.plan_args.pp_degree)]),
                  dp_mode=Counter([repr(case.plan_args.dp_mode)]), world_size=Counter([len(case.graph.world())]),
                  features=case_features(case),
                  options=Counter(option_key(name, value) for name, value in case.target_options))
    rank = case.graph.world()[0]
    module = build_module(localize(case.graph, rank))
    try:
        plan = get_target(target_name).plan(case, module, rank)
    except ValueError as exc:
        reach.errors[str(exc).split(":")[0]] += 1
        return reach
    nodes = tuple(module.graph.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    by_name = {node.name: node for node in nodes}
    groups = case.group_ranks(rank)
    for decision in plan.decisions:
        action, reason = decision["action"], decision["reason"]
        reach.decisions[(action, reason)] += 1
        current = _current(plan, decision["previous_node"], index, by_name) if action == "split" else ()
        site = Site(by_name[decision["node"]], nodes, index, case.plan_args, groups, current)
        found = classify(site, action, reason)
        if found is None:
            reach.unexplained[(action, reason)] += 1
        else:
            reach.subconditions[found.key] += 1
    return reach


def measure(strategy: st.SearchStrategy[Case], examples: int = 2000, seed: int = 0,
            target_name: str = "reference", progress: Optional[Callable[[int, int], None]] = None) -> Reach:
    """The reach of ``examples`` draws of ``strategy`` under a fixed seed (generation only), each
    case with one draw of the target's open options, as a campaign draws them (every value counted);
    ``progress`` hears (cases drawn, cases whose planner arguments were refused) after each draw.
    A target without a planner (inductor's passes) has no decisions of its own: the reasons are the
    reference planner's on the same cases, which is what the strategies reach."""
    target = get_target(target_name)
    space = target.options()
    planner = target_name if target.has_planner else "reference"
    total = Reach(space=tuple(option_key(name, value) for name, values in space.items() for value in values),
                  target=target_name, planner=planner)

    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=SLOW_OK)
    @hypothesis.seed(seed)
    @given(with_target_options(strategy, space))
    def collect(case: Case) -> None:
        total.add(case_reach(case, planner))
        if progress is not None:
            progress(total.cases, sum(total.errors.values()))

    collect()
    return total


def unreached(reach: Reach, expected: dict[str, tuple[str, ...]]) -> list[str]:
    """Reasons (``action reason``), reachable sub-conditions (``reason/name``), parallel-mode
    values (``pp_degree=2``), world sizes (``world_size=3``) and FEATURES never reached."""
    missing = [f"{action} {reason}" for action, reasons in expected.items() for reason in reasons
               if (action, reason) not in reach.decisions]
    missing += [s.key for s in SUBCONDITIONS if not s.unreachable and s.key not in reach.subconditions]
    missing += [f"world_size={size}" for size in WORLD_SIZES if not reach.world_size[size]]
    missing += [name for name in FEATURES if not reach.features[name]]
    missing += [f"option {key}" for key in reach.space if not reach.options[key]]
    return missing + [f"{name}={value!r}" for name, values in PARALLEL_VALUES.items() for value in values
                      if repr(value) not in getattr(reach, name)]


def format_reach(reach: Reach, expected: dict[str, tuple[str, ...]]) -> str:
    """Counts per reason and per sub-condition, the parallel-mode values drawn, and what was missed."""
    lines = [f"cases {reach.cases}", f"{'action':<10} {'reason / sub-condition':<56} {'count':>7}"]
    for action in ACTIONS:
        for reason in dict.fromkeys(s.reason for s in SUBCONDITIONS if s.action == action):
            lines.append(f"{action:<10} {reason:<56} {reach.decisions[(action, reason)]:>7}")
            for sub in (s for s in SUBCONDITIONS if s.action == action and s.reason == reason):
                note = f"  (unreachable: {sub.unreachable})" if sub.unreachable else ""
                lines.append(f"{'':<10}   {sub.name:<53} {reach.subconditions[sub.key]:>7}{note}")
    for message, count in sorted(reach.errors.items()):
        lines.append(f"{'error':<10} {message[:56]:<56} {count:>7}")
    lines.append("pp_degree values: " + ", ".join(f"{v}={n}" for v, n in sorted(reach.pp_degree.items())))
    lines.append("dp_mode values: " + ", ".join(f"{v}={n}" for v, n in sorted(reach.dp_mode.items())))
    lines.append("world sizes: " + ", ".join(f"{v}={n}" for v, n in sorted(reach.world_size.items())))
    lines.append("features: " + ", ".join(f"{name}={reach.features[name]}" for name in FEATURES))
    if reach.space:
        drawn = sum(bool(reach.options[key]) for key in reach.space)
        lines.append(f"target options: {drawn} of {len(reach.space)} values drawn: "
                     + ", ".join(f"{key} {reach.options[key]}" for key in reach.space))
    if reach.planner != reach.target:
        lines.append(f"decisions asked of: the {reach.planner} planner ({reach.target} exposes none: the reasons "
                     f"are what the strategies reach)")
    for (action, reason), count in sorted(reach.unexplained.items()):
        lines.append(f"UNEXPLAINED {action} {reason}: {count} decisions no sub-condition explains")
    missing = unreached(reach, expected)
    lines.append(f"unreached: {', '.join(missing)}" if missing else "unreached: none")
    return "\n".join(lines)
