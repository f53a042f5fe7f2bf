"""``torch-inductor``: PyTorch's own bucketing passes (``torch._inductor.fx_passes.bucketing``/``fsdp``).

Set-up they need: every collective and its input carry FakeTensor values in ``meta["val"]``
(FakeTensorProp, with frees and barriers skipped), and the group names resolve to process groups
(a ``fake`` process group, registered under each name). The merged graph is specific to the
rank it was bucketed on, so each simulated rank is bucketed in turn with its own fake world.
These passes produce no reference-format plan: the plan-independent checkers judge them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

from torch import fx

from fsdp_verify.graph import collectives
from fsdp_verify.graph.spec import CASTS
from fsdp_verify.graph.values import DTYPES
from fsdp_verify.model.case import Case
from fsdp_verify.execute.inputs import make_inputs
from fsdp_verify.reference.planner import static_shape
from fsdp_verify.targets.base import Target, TargetNotFound, family
from fsdp_verify.targets.generators import Generator
from fsdp_verify.targets.post_grad import MANUAL, MANUAL_DEPS, MANUAL_MODE, inductor_route, post_grad_pass

MODES = ("default", "custom_ops", "custom_ops_multidtype", "coalesced")
# bucketing.bucket_all_gather, fsdp.bucket_fsdp_all_gather, or the manual scheduler alone
ENTRY_POINTS = ("bucket", "fsdp", "manual")


# Inductor's own options (torch._inductor.config) that route post-grad graphs to the passes that
# bucket or reorder collectives, with the choices each may take (the first is what an undrawn
# option takes). ``bucket_cap_mb`` stands for the three ``*_bucket_size_determinator`` callables
# (None: inductor's default caps; a number: that many MB per bucket, to force splits). Options of
# ``aten_distributed_optimizations`` (the overlap scheduler, its bucketer and FSDP pre-bucketing)
# are named dotted, as ``config.patch`` takes them. docs/inductor-config.md tables them all.
_AO = "aten_distributed_optimizations."
CONFIG_SPACE: dict[str, tuple] = {
    "bucket_all_gathers_fx": ("all", "only_fsdp", "none"),
    "bucket_all_gathers_bucket_mode": ("default", "custom_ops", "custom_ops_multidtype"),
    "bucket_reduce_scatters_fx": ("all", "none"),
    "bucket_reduce_scatters_bucket_mode": ("default", "custom_ops", "custom_ops_multidtype"),
    "bucket_all_reduces_fx": ("none", "all"),
    "dedup_reduce_scatters": (False, True),
    "bucket_cap_mb": (None, 0.001),
    # overlap_manual_scheduling.manual_overlap_bucketing, as frameworks call it (no config routes
    # there): off, one plan entry per FSDP unit, or two units per entry; its own two arguments.
    MANUAL: ("off", "blocks", "pairs"),
    MANUAL_DEPS: (False, True),
    MANUAL_MODE: (None, "default", "custom_ops_multidtype"),
    _AO + "enable_overlap_scheduling": (False, True),
    _AO + "collective_bucketing": (None, True, False),
    _AO + "insert_overlap_deps": (None, False),  # None: inductor inserts them (True)
    _AO + "bucket_mode": (None, "default", "custom_ops", "custom_ops_multidtype", "coalesced"),
    _AO + "max_in_flight_gb": (None, 1e-6),  # tiny: every prefetch is over the limit
    _AO + "max_coll_distance": (None, 1),
    _AO + "max_compute_pre_fetch": (None, 1),
    _AO + "compute_overlap_multipler": (None, 0.1, 10.0),
    _AO + "max_memory_increase_gb": (None, 0.0),
    _AO + "max_memory_increase_ratio": (None, 0.0),
    _AO + "bucket_exposed_first": (None, True, False),
    _AO + "bucket_only_internode_comms": (False, True),
    _AO + "enable_fusion_regions": (True, False),
    _AO + "prioritize_bucketing_during_scheduling": (True, False),
    _AO + "overlap_scheduling_autofix_cycles": (False, True),
    _AO + "collective_estimator": ("analytical",),  # "benchmark" times collectives with CUDA events
    _AO + "compute_estimator": ("analytical",),     # "benchmark" (inductor's default) times ops on the GPU
    _AO + "pre_bucketing_fsdp_collectives": (True, False),
    _AO + "pre_bucketing_fsdp_collectives_bucket_cap_mb": (None, 0.001),
    _AO + "pre_bucketing_fsdp_collectives_min_bucket_cap_mb": (10.0, 0.0),
    _AO + "pre_bucketing_fsdp_collectives_max_bucket_cap_mb": (500.0, 0.001),
    _AO + "pre_bucketing_fsdp_collectives_saturation_calibration_multiplier": (1.0, 0.01),
}
# Options those passes read that are not drawn, each with why (tests/targets/test_inductor_config.py fails,
# naming the option, when the installed torch's passes read one that is in neither table).
EXCLUDED: dict[str, str] = {
    "bucket_all_gathers_fx_bucket_size_determinator": "drawn as bucket_cap_mb (a callable cannot be recorded)",
    "bucket_reduce_scatters_fx_bucket_size_determinator": "drawn as bucket_cap_mb",
    "bucket_all_reduces_fx_bucket_size_determinator": "drawn as bucket_cap_mb",
    _AO + "custom_runtime_estimation": "a callable (a user's cost model); the analytical model stands in",
    _AO + "profile_guided_estimations_profile_path": "needs a Chrome trace of a real run",
    _AO + "log_final_collectives_estimations": "logging only: changes no decision",
    _AO + "pre_bucketing_fsdp_collectives_verbose": "logging only: changes no decision",
    _AO + "spmd_check": "compares graphs across ranks over the real process group; the harness plans each rank "
                        "in one process on fake groups (real rank processes: --ranks real)",
    _AO + "spmd_mismatch": "what spmd_check does on a mismatch (spmd_check is excluded)",
    _AO + "enable_low_contention_collectives": "replaces NCCL collectives by copy-engine ones: CUDA only",
    _AO + "low_contention_skip_overlap_check": "an option of the low-contention replacement (CUDA only)",
    _AO + "low_contention_min_bytes_per_rank": "an option of the low-contention replacement (CUDA only)",
    _AO + "allow_comms_decompositions": "read by inductor's lowering, not by the post-grad passes",
    "deterministic": "a global inductor mode; the harness pins the analytical estimators it implies",
    "unbacked_symint_fallback": "a size hint for unbacked (data-dependent) symbols: the fuzz target's graphs have "
                                "static shapes; endtoend's selecting layers reach the unbacked path at the default "
                                "hint (a hint moves only the estimates, the scheduler's own decisions are drawn)",
    "test_configs.assume_bucketing_reduces_latency": "a test-only switch of inductor's own test suite",
}
DEFAULTS = {name: choices[0] for name, choices in CONFIG_SPACE.items()}
_HARNESS_ONLY = ("fsdp_verify.free_tensor_storage", "fsdp_verify.effect_barrier")
# Python operators as a symbolic trace records them, and the aten op make_fx lowers each to.
ATEN_OF_PYTHON_OPERATOR = {"operator.neg": "aten.neg.default", "operator.add": "aten.add.Tensor",
                            "operator.mul": "aten.mul.Tensor"}


def _packet(target: str) -> bool:
    """A c10d op called through its packet (the FSDP pass's form), not a ``.default`` overload."""
    return collectives.is_packet(target)


def _pins(mode: str, entry: str) -> dict[str, Any]:
    """``torch-inductor:MODE@ENTRY`` as the options it fixes (``coalesced`` is a pass mode that no
    config literal names: pinning it is a direct-call configuration)."""
    if mode and mode not in MODES or entry and entry not in ENTRY_POINTS:
        raise ValueError(f"torch-inductor: mode must be one of {MODES}, entry one of {ENTRY_POINTS}")
    pins: dict[str, Any] = {}
    if mode:
        pins.update(bucket_all_gathers_bucket_mode=mode, bucket_reduce_scatters_bucket_mode=mode)
    if entry == "manual":  # the manual scheduler with inductor's own bucketing off
        pins.update({MANUAL: "blocks", "bucket_all_gathers_fx": "none", "bucket_reduce_scatters_fx": "none",
                     _AO + "enable_overlap_scheduling": False})
        if mode:
            pins[MANUAL_MODE] = mode
    elif entry:
        pins["bucket_all_gathers_fx"] = "only_fsdp" if entry == "fsdp" else "all"
    return pins




@dataclass(frozen=True)
class Excuse:
    """A rule of the harness's that inductor never promised, and which findings of a failure it
    covers (indices into them). A failure is a contract mismatch only when its excuses together
    cover every finding: a span finding beside a folded cast is excused, a span finding beside a
    wrong value is not."""

    reason: str
    covers: frozenset[int]


def _cover(findings: Sequence[Any], covered: Callable[[Any], bool], reason: str) -> Optional[Excuse]:
    indices = frozenset(i for i, f in enumerate(findings) if covered(f))
    return Excuse(reason, indices) if indices else None


def _span_excuse(case: Case, findings: Sequence[Any], options: dict[str, Any]) -> Optional[Excuse]:
    """On captured graphs: a fused window blocked by another collective (spec 2.7's span rule)."""
    if "captured_phase" not in case.graph.attrs:
        return None
    return _cover(findings, lambda f: f.key == ("ordering", "fused_window") and f.details.get("blocker") == "collective",
                  "inductor buckets every collective of one compiled graph across the collectives between its "
                  "members (the FSDP planner's span rule, spec 2.7, is not its contract); the cross-rank streams "
                  "and deadlock checks found nothing")


def _schedulers(options: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the overlap scheduler, and whether the manual one, run under ``options``."""
    return bool(options.get(_AO + "enable_overlap_scheduling")), options.get(MANUAL, "off") != "off"


def _buckets_gathers(options: dict[str, Any]) -> bool:
    """Whether some pass of the configuration buckets all-gathers: inductor's own, the manual
    scheduler's plans, or the overlap scheduler's bucketer or FSDP pre-bucketing."""
    overlap, manual = _schedulers(options)
    return options.get("bucket_all_gathers_fx", "none") != "none" or manual or \
        (overlap and bool(options.get(_AO + "collective_bucketing") or options.get(_AO + "pre_bucketing_fsdp_collectives")))


def _cast_fold_excuse(case: Case, findings: Sequence[Any], options: dict[str, Any]) -> Optional[Excuse]:
    """Where a pass buckets all-gathers: the lost nodes that are casts of a parameter feeding a gather
    (the pattern ``fsdp.is_fsdp_all_gather`` and the manual scheduler both fold into the bucket's
    copy-in, on captured and harness graphs alike), and the layout findings about such a cast's
    parameter."""
    if not _buckets_gathers(options):
        return None
    nodes = {n.name: n for n in case.graph.nodes}
    gathers = [n for n in case.graph.nodes if "all_gather" in n.target and n.inputs()]
    folded = {n.inputs()[0]: str(n.meta.get("param_name")) for n in gathers
              if nodes[n.inputs()[0]].target in CASTS and nodes[n.inputs()[0]].inputs()
              and nodes[nodes[n.inputs()[0]].inputs()[0]].op == "placeholder"}
    lost = ("dependencies", "node_lost")

    def cast_lost(finding: Any) -> bool:
        return finding.key == lost and set(finding.nodes) <= set(folded)
    # Only the folded casts are covered: another lost node (a dedup's add, or a pass's bug) stays
    # for another excuse to name, and ``excused`` keeps the case a candidate when none does.
    gone = {name for f in findings if cast_lost(f) for name in f.nodes}
    params = {folded[c] for c in gone}
    return _cover(findings, lambda f: cast_lost(f) or (f.checker == "layout" and f.details.get("param") in params),
                  "inductor's all-gather bucketing folds each parameter's pre-gather cast (mixed precision) into "
                  "the bucket's copy-in by design: only those cast nodes go (and the identity codes the layout "
                  "check plants on them), values are kept") if gone else None


_REORDERED = {("ordering", "group_order"), ("ordering", "fused_window")}


def _reorder_excuse(case: Case, findings: Sequence[Any], options: dict[str, Any]) -> Optional[Excuse]:
    """The overlap scheduler and the manual one reorder collectives within a group by design (to
    overlap them with compute), and bucket across whatever lies between: the FSDP planner's
    issue-order and span rules are not their contract (the ordering checker's cross-rank streams
    and deadlock verdicts are never excused, so a reorder that differs between ranks still fails)."""
    overlap, manual = _schedulers(options)
    if not (overlap or manual):
        return None
    which = "overlap scheduler" if overlap else "manual scheduler (per module plan)"
    return _cover(findings, lambda f: f.key in _REORDERED,
                  f"inductor's {which} reorders and buckets collectives across compute by design; every rank "
                  "issues the same order (the cross-rank streams and deadlock checks found nothing)")


def _collective_bytes(case: Case) -> int:
    """What every collective of the graph holds at once, as a scheduler that prefetches or delays
    them all could: an all-gather its shard (the bucket's copy-in) and the gathered result twice (a
    bucket's flat buffer beside its members' copies out); a reduce-scatter or an all-reduce its
    input and its result. Sizes from each collective's FSDP spec (``fsdp_bucket_spec``)."""
    total = 0
    for node in case.graph.nodes:
        spec = node.meta.get("fsdp_bucket_spec")
        kind = next((k for k in ("all_gather", "reduce_scatter", "all_reduce") if k in node.target), None)
        if kind is None or not isinstance(spec, dict):
            continue
        dtype = spec.get("dtype")
        dtype = DTYPES.get(dtype) if isinstance(dtype, str) else dtype
        itemsize = getattr(dtype, "itemsize", 8)
        shapes = [spec.get(key) for key in ("input_shape", "output_shape")]
        if not all(static_shape(shape) for shape in shapes):  # a malformed spec (rule 8 skips it) holds nothing known
            continue
        sizes = [math.prod(shape) * itemsize for shape in shapes]
        total += sizes[0] + (2 if kind == "all_gather" else 1) * sizes[1]
    return total


# What ``schedule_overlap_bucketing`` takes when the config leaves a memory option unset (None is
# not passed on): 1 GB or 5% of its baseline peak, the larger, may be added by prefetching.
_OVERLAP_MEMORY_DEFAULTS = {"max_memory_increase_gb": 1.0, "max_memory_increase_ratio": 0.05}


def _overlap_memory_allowance(options: dict[str, Any], original_peak: int) -> int:
    """The bytes the overlap scheduler lets prefetching add to its baseline peak, as the pass computes
    them: the larger of the absolute cap and the ratio of the peak (a drawn 0 of one leaves the
    other's default, so only both at 0 promise no increase). Its peak is its own estimate; the
    harness's original peak stands in for it."""
    gb, ratio = (default if options.get(_AO + key) is None else options[_AO + key]
                 for key, default in _OVERLAP_MEMORY_DEFAULTS.items())
    return max(int(gb * 1024 ** 3), int(original_peak * ratio))


def _budgeted_memory(case: Case) -> bool:
    """Whether the overlap scheduler's memory estimate sees the case's tensors: it tracks storages on
    devices other than the CPU only (``memory_estimator.MemoryTracker``'s default device filter)."""
    return any(not str(param.device).startswith("cpu") for param in case.graph.params)


def _prefetch_memory_excuse(case: Case, findings: Sequence[Any], options: dict[str, Any]) -> Optional[Excuse]:
    """Both schedulers prefetch gathers ahead of their compute, so peak memory rises by design past
    the FSDP rewriter's bound (twice the largest fused buffer), by at most every collective's
    buffers held at once (``_collective_bytes``); a rise past that stays a candidate. Within it, a
    leaked buffer is not told from a prefetched one: under these schedulers the peak bound is
    weaker. The manual scheduler has no memory limit (and where it runs, the overlap scheduler's
    limit bounds only what that adds to the graph it receives); the overlap scheduler alone keeps
    to its allowance (``_overlap_memory_allowance``), and a rise past that stays a candidate too:
    with both options at 0 it promised no increase. That allowance is kept in the pass's own
    estimate (``memory_estimator.MemoryTracker``), which counts non-CPU storages only: on a graph
    whose parameters live on the CPU the pass sees a peak of 0 bytes and its limit bounds nothing,
    so there, as for the manual scheduler, the room alone bounds the rise."""
    overlap, manual = _schedulers(options)
    if not (manual or overlap):
        return None
    room = _collective_bytes(case)
    unbounded = manual or not _budgeted_memory(case)

    def prefetched(finding: Any) -> bool:
        before = finding.details.get("original_peak_bytes", 0)
        rise = finding.details.get("rewritten_peak_bytes", 0) - before
        if finding.key != ("memory", "peak_memory") or not isinstance(rise, int) or not isinstance(before, int):
            return False
        # the manual scheduler has no limit, and the overlap scheduler's bounds only its own additions
        return rise <= (room if unbounded else min(room, _overlap_memory_allowance(options, before)))
    which = "manual scheduler" if manual else "overlap scheduler, within its memory allowance," if not unbounded \
        else "overlap scheduler (its memory budget counts no CPU storage, so it bounds nothing on this graph)"
    return _cover(findings, prefetched,
                  f"inductor's {which} moves collectives ahead of or behind their compute, raising peak memory by "
                  f"design past the FSDP rewriter's bound (at most every collective's buffers at once, {room} bytes)")


def _chained(case: Case, kind: str) -> bool:
    """A collective of ``kind`` whose input is another one's result (through its wait and views): a
    parameter sharded on both dims of a 2-D mesh, as DTensor gathers ``(Shard(0), Shard(0))`` (and
    reduce-scatters its gradient twice)."""
    nodes = {n.name: n for n in case.graph.nodes}

    def after(name: str, depth: int = 0) -> bool:
        node = nodes.get(name)
        if node is None or node.op != "call_function" or depth > 8:
            return False
        if "wait_tensor" in node.target:
            return any(kind in nodes[i].target for i in node.inputs() if i in nodes)
        return len(node.inputs()) == 1 and after(node.inputs()[0], depth + 1)

    return any(kind in n.target and n.inputs() and after(n.inputs()[0]) for n in case.graph.nodes)


def _chained_collectives(case: Case) -> bool:
    """A gather whose input is another gather's result, or a reduce-scatter of another's."""
    return _chained(case, "all_gather") or _chained(case, "reduce_scatter")


def _f10_excuse(case: Case, findings: Sequence[Any], options: dict[str, Any]) -> Optional[Excuse]:
    """The manual scheduler is written for SimpleFSDP's placements (``(Shard(0),)`` on a flattened
    mesh, or HSDP's ``(Replicate(), Shard(0))``): one collective per parameter. On a parameter
    sharded on both mesh dims (gathered twice, its gradient reduce-scattered twice, chained) it
    buckets the outer collectives before the inner bucket's wait and crashes on its own graph lint
    (docs/findings.md, F10): real, but on input SimpleFSDP never hands it, so it is counted apart.
    Only a crash is excused, never a wrong result."""
    if options.get(MANUAL, "off") == "off" or not _chained_collectives(case):
        return None
    return _cover(findings, lambda f: f.key == ("target", "raised"),
                  "the manual scheduler assumes one collective per parameter (SimpleFSDP's placements); a "
                  "parameter sharded on both mesh dims is gathered and reduce-scattered twice, which it does "
                  "not support (F10)")


def _summed_scatters(case: Case) -> set[str]:
    """The adds of reduce-scatters' waited results, or of such sums (a weight used three times sums
    its gradients in a chain): what ``dedup_reduce_scatters`` rewrites."""
    nodes = {n.name: n for n in case.graph.nodes}
    summed: set[str] = set()

    def scattered(name: str) -> bool:
        node = nodes.get(name)
        if node is None:
            return False
        launch = nodes.get(node.inputs()[0]) if node.inputs() else None
        return name in summed or ("wait_tensor" in node.target and launch is not None and "reduce_scatter" in launch.target)
    for n in case.graph.nodes:  # in graph order: an add's summed inputs come before it
        if n.target.startswith("aten.add") and len(n.inputs()) == 2 and all(scattered(i) for i in n.inputs()):
            summed.add(n.name)
    return summed


def _dedup_excuse(case: Case, findings: Sequence[Any], options: dict[str, Any]) -> Optional[Excuse]:
    """``dedup_reduce_scatters`` rewrites ``add(wait(rs(a)), wait(rs(b)))`` into ``wait(rs(add(a, b)))``
    by design (reduce-scatter is linear; fsdp.dedup_fsdp_reduce_scatter): the add of the waited
    results goes (a new one sums the inputs) and the group's reduce-scatters carry fewer elements.
    A dedup that drops a gradient changes values, which ``numerics`` reports and nothing excuses."""
    if not options.get("dedup_reduce_scatters"):
        return None
    summed = _summed_scatters(case)
    if not summed:
        return None
    return _cover(findings, lambda f: (f.key == ("dependencies", "node_lost") and set(f.nodes) <= summed)
                  or (f.key == ("consistency", "volume_changed") and "reduce_scatter" in str(f.details.get("op"))),
                  "inductor's dedup_reduce_scatters turns a sum of reduce-scatters' results into one "
                  "reduce-scatter of the summed inputs by design: the add goes and the volume falls")


_EXCUSES = (_span_excuse, _cast_fold_excuse, _reorder_excuse, _prefetch_memory_excuse, _f10_excuse, _dedup_excuse)


def _across_phases(finding: Any) -> bool:
    """An ordering finding about the forward/backward boundary alone: forward kept before backward,
    or a fused window whose blocker is a node of the other phase."""
    return finding.key == ("ordering", "phase") or \
        (finding.key == ("ordering", "fused_window") and finding.details.get("blocker") == "other-phase node")


def excused(case: Case, findings: Sequence[Any], options: dict[str, Any]) -> list[str]:
    """The reasons of the excuses that together cover every finding, or none when one is left."""
    if not findings:
        return []
    found = [e for e in (excuse(case, findings, options) for excuse in _EXCUSES) if e is not None]
    covered = frozenset().union(*(e.covers for e in found))
    return [e.reason for e in found] if covered == frozenset(range(len(findings))) else []


class TorchInductorTarget(Target):
    """PyTorch's bucketing passes as inductor's post-grad pipeline routes to them from its config.

    The configuration space is ``CONFIG_SPACE`` minus what the name pins; each example of a
    campaign draws the rest (recorded in the case). Unconfigured options take ``DEFAULTS``.
    """

    summary = "PyTorch's torch._inductor.fx_passes bucketing, routed by inductor config options"
    external = True
    default_strategy = "captured"  # SimpleFSDP-style models captured through torch.compile
    # where every pass that buckets collectives logs (bucketing, fsdp, the overlap scheduler and its
    # bucketer, the manual scheduler): some compute what they log only when DEBUG is on
    loggers = ("torch._inductor.fx_passes",)
    # post-grad passes run inside compile_fx's ``preserve_rng_state()`` (torch's CPU and CUDA
    # generators; Python's and numpy's are not restored)
    restored_generators = (Generator.TORCH, Generator.TORCH_CUDA)

    def __init__(self, pins: dict[str, Any] | None = None, drawn: dict[str, Any] | None = None):
        self.pins, self.drawn = dict(pins or {}), dict(drawn or {})
        # Inductor sets TORCHINDUCTOR_CACHE_DIR in the environment the first time it asks for its
        # cache folder; done here, in the process that makes the target, a child's first case no
        # longer changes the environment (which retires the child: a fork per case).
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        cache_dir()
        modes = {self.pins.get("bucket_all_gathers_bucket_mode")} - {None}
        entry = "@fsdp" if self.pins.get("bucket_all_gathers_fx") == "only_fsdp" else ""
        if self.pins.get(MANUAL, "off") != "off":
            entry = "@manual"
        self.name = "torch-inductor" + (f":{modes.pop()}" if modes else "") + entry

    @property
    def config(self) -> dict[str, Any]:
        """The options this run uses."""
        return {**DEFAULTS, **self.drawn, **self.pins}

    def options(self) -> dict[str, tuple]:
        return {name: choices for name, choices in CONFIG_SPACE.items() if name not in self.pins}

    def configure(self, options: dict[str, Any]) -> "TorchInductorTarget":
        unknown = {k: v for k, v in options.items() if k not in CONFIG_SPACE or v not in CONFIG_SPACE[k]}
        if unknown:
            raise ValueError(f"torch-inductor: unknown options or values {unknown}; the space is {CONFIG_SPACE}")
        return TorchInductorTarget(self.pins, options)

    def normalise(self, case: Case) -> Case:
        """What make_fx/aot_autograd hand inductor: ``.default`` overloads, positional group names, aten
        ops for Python's operators, and no storage frees or barriers (post-grad graphs are functional)."""
        kept = {n.name for n in case.graph.nodes if n.target not in _HARNESS_ONLY}
        nodes = []
        for node in case.graph.nodes:
            if node.name not in kept:
                continue
            target, args, kwargs = node.target, node.args, dict(node.kwargs)
            if _packet(target):
                target += ".default"
            target = ATEN_OF_PYTHON_OPERATOR.get(target, target)
            if collectives.op_name(target, (collectives.NAMESPACE,)) and "group_name" in kwargs:
                args = (*args, kwargs.pop("group_name"))
            nodes.append(replace(node, target=target, args=args, kwargs=kwargs))
        return replace(case, graph=case.graph.with_nodes(nodes))

    def contract_mismatches(self, case: Case, checkers: tuple[str, ...] = (), findings: Sequence[Any] = (),
                            documented: bool = True) -> list[str]:
        """The forms of ``case`` a post-grad pass never receives, and (``documented``) the excuses of
        inductor's documented behaviours that cover ``findings``."""
        found = []
        phases = {bool(n.meta.get("autograd_backward")) for n in case.graph.nodes
                  if collectives.is_launch(n.target)}
        # Only ordering findings about the phase boundary: a lost node, a broken edge or a read
        # before its wait is wrong in any graph, and so are a window across another collective or
        # an effect, a group's order and the ranks' streams, which a forward-only graph shows too.
        if len(phases) == 2 and checkers and set(checkers) <= {"ordering"} and findings \
                and all(_across_phases(f) for f in findings):
            found.append("a joint forward+backward graph: inductor compiles the two as separate graphs, so its "
                         "scheduling never has to respect the phase boundary the ordering rules enforce")
        targets = [n.target for n in case.graph.nodes]
        if any(_packet(t) for t in targets):
            found.append("op packets (inductor only sees .default overloads)")
        if any(t in _HARNESS_ONLY for t in targets):
            found.append("storage frees or effect barriers (post-grad graphs are functional)")
        if any(t in ATEN_OF_PYTHON_OPERATOR for t in targets):
            found.append("Python operator calls (post-grad graphs hold aten ops only)")
        if any(collectives.op_name(n.target, (collectives.NAMESPACE,)) and "group_name" in n.kwargs
               for n in case.graph.nodes):
            found.append("group_name passed by keyword (make_fx passes it positionally)")
        options = {**DEFAULTS, **dict(case.target_options), **self.pins}
        if documented:
            found += excused(case, findings, options)
        waited = Counter(n.inputs()[0] for n in case.graph.nodes if "wait_tensor" in n.target and n.inputs())
        if any(count > 1 for count in waited.values()):
            found.append("a launch with several waits (make_fx emits one wait per launch)")
        return found

    def rewrite(self, case: Case, modules: dict[int, fx.GraphModule]) -> dict[int, list[Any]]:
        world, groups = case.graph.world(), dict(case.graph.groups)
        for rank in list(modules):
            modules[rank] = post_grad_pass(modules[rank], rank, len(world), groups,
                                           make_inputs(case.graph, rank, case.seed),
                                           lambda module: inductor_route(module, self.config))
        return {}


def make(spec: str = "") -> TorchInductorTarget:
    """``torch-inductor[:mode][@entry]`` -> the target, with what the name pins."""
    mode, _, entry = spec.partition("@")
    return TorchInductorTarget(_pins(mode, entry))


@family("torch-inductor[:mode][@fsdp|@manual]", "PyTorch's inductor bucketing passes; modes default, custom_ops, "
        "custom_ops_multidtype, coalesced; @fsdp uses fx_passes.fsdp; @manual runs the manual scheduler "
        "(overlap_manual_scheduling) on per-block plans with inductor's own bucketing off",
        claims=lambda name: name == "torch-inductor" or name.startswith(("torch-inductor:", "torch-inductor@")))
def named(name: str) -> TorchInductorTarget:
    """``torch-inductor[:mode][@entry]`` as the target list names it."""
    try:
        return make(name[len("torch-inductor"):].lstrip(":"))
    except ValueError as exc:
        raise TargetNotFound(str(exc)) from None
