"""Hypothesis strategies: valid FSDP graphs, graphs with one targeted defect, and their plan args.

Draw structure, not nodes: a Blueprint is a handful of choices (counts, shapes, dtypes, view
kinds, flags) that ``render`` turns into a graph deterministically. Every choice shrinks toward
the simplest graph: one block, one parameter, small shapes, float32, one group, two ranks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Optional

from hypothesis import strategies as st

from fsdp_verify.graph import edit
from fsdp_verify.model.case import Case, PlanArgs

from fsdp_verify.strategies import mutations
from fsdp_verify.strategies.uneven import sometimes_uneven
from fsdp_verify.strategies.blueprint import (DTYPES, PREP_KINDS, STORAGE_ONLY, VIEW_KINDS, WIRES, Blueprint, ParamDraw,
                                             render)


@dataclass(frozen=True)
class Size:
    """Bounds on a generated graph: ``tiny`` (CI), ``default`` (~80 nodes), ``medium`` (~200),
    ``large`` (~700) and ``scale`` (10k+). The minimums bound shrinking too."""

    max_blocks: int = 3
    max_params: int = 4
    max_dims: int = 3
    max_dim: int = 4
    min_blocks: int = 1
    min_params: int = 1
    uniform: bool = False  # draw one block and repeat it (identical layers; keeps huge graphs cheap to draw)
    wide: bool = True  # now and then a parameter past a half-precision reduce-scatter's exact span
    wide_one_in: int = 16  # how rarely: one parameter in this many
    prefix_one_in: int = 4  # one multi-block graph in this many names its blocks blocks.1, blocks.10, ...
    strided_one_in: int = 5  # one multi-dim parameter in this many gathers a non-contiguous copy
    # one expert parameter in this many is sharded over the strided subgroups (the mesh's other axis)
    strided_group_one_in: int = 3
    regather: Optional[bool] = None  # every parameter gathered again for backward (None: drawn for each)
    dtypes: tuple[str, ...] = DTYPES  # the parameters' dtypes drawn from
    # expert groups (several subgroups of the FSDP group) wherever the degree has room for them, not in
    # one such blueprint in two; with ``min_degree`` 4, most blueprints have them
    experts_always: bool = False
    min_degree: int = 0  # group degrees drawn only from those at least this


SIZES = {
    "tiny": Size(max_blocks=2, max_params=3, max_dims=2, max_dim=3),
    "default": Size(),
    "medium": Size(max_blocks=4, max_params=5, min_blocks=2, min_params=3),
    "large": Size(max_blocks=12, max_params=8, min_blocks=6, min_params=4),
    "scale": Size(max_blocks=100, max_params=8, min_blocks=90, min_params=7, max_dims=2, max_dim=3, uniform=True,
                  wide=False),
}


def _size(size: Size | str) -> Size:
    return SIZES[size] if isinstance(size, str) else size


# Hypothesis validates a strategy object on its first draw, and a blueprint's draw built dozens of
# them (building and validating were a fifth of a parameter's draw): the same arguments give one
# object here. An object drawn again draws the same choices as a new one with its arguments.
@functools.lru_cache(maxsize=None)
def _integers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


def _sampled(values: Iterable) -> st.SearchStrategy:
    return _sampled_tuple(tuple(values))


@functools.lru_cache(maxsize=None)
def _sampled_tuple(values: tuple) -> st.SearchStrategy:
    return st.sampled_from(values)


@functools.lru_cache(maxsize=None)
def _fixed_lists(low: int, high: int, length: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(low, high), min_size=length, max_size=length)


@functools.lru_cache(maxsize=None)
def _none_or(low: int, high: int) -> st.SearchStrategy[Optional[int]]:
    return st.none() | st.integers(low, high)


_BOOLEANS = st.booleans()


# A focus is the mix with the odds of one rare draw raised, for a bug class that hides there: a
# planted bug of the class is hunted with it (seconds, not minutes), and a user can fuzz with it. It
# draws no shape the mix does not draw.
FOCUSES = {
    "wide": {"wide_one_in": 2},  # codes that repeat: a half-precision reduce-scatter past its exact span
    "prefix_scopes": {"prefix_one_in": 1, "min_blocks": 2},  # scopes whose names share a prefix without a dot
    "backward_gathers": {"regather": True, "min_params": 2},  # buckets of all-gathers for backward
    # parameters wider than any half-precision gather of theirs: a wire their own dtype holds is
    # then wider than needed (a rule's hunt may add it: ``rule:every_member_cast/every_member_cast@full_precision``)
    "full_precision": {"dtypes": ("float32", "float64")},
    # every multi-dim parameter gathers a non-contiguous copy: a copy-in that packs storage, not elements
    "strided_sources": {"strided_one_in": 1},
    # several groups and subgroups in most graphs: a driver that validates only the first goes unseen
    # where one group is all there is
    # and groups of one size with different ranks (subgroups on both axes of a 2-D mesh)
    "expert_groups": {"experts_always": True, "min_degree": 4, "strided_group_one_in": 2},
}


def focused(size: Size | str, focus: str) -> Size:
    """``size`` with the draws of ``focus`` (a key of FOCUSES) made common."""
    return replace(_size(size), **FOCUSES[focus])


@st.composite
def param_draws(draw, *, dtype: str, expert_ok: bool, size: Size, forced_regather: bool | None = None,
                wire: str = "", strided_ok: bool = False) -> ParamDraw:
    """One parameter of a block (its dtype and gather cast usually the block's)."""
    dims = draw(_integers(1, size.max_dims))
    shape = tuple(draw(_fixed_lists(1, size.max_dim, dims)))
    if draw(_integers(0, 9)) == 0:
        dtype = draw(_sampled(size.dtypes))
    expert = expert_ok and draw(_BOOLEANS)
    # Some experts are sharded over the mesh's other axis of the same size (strided subgroups)
    # (drawn for experts only, as ``own_scope`` is: whether a parameter is an expert is drawn first)
    strided_group = expert and strided_ok and draw(_integers(0, size.strided_group_one_in - 1)) == 0
    # One in five multi-dim parameters gathers a non-contiguous copy; shrinking goes to contiguous.
    # The choice is drawn for every parameter so that each one spans the same number of choices,
    # which lets the shrinker delete a parameter whole.
    strided = draw(_integers(0, size.strided_one_in - 1)) == size.strided_one_in - 1
    # One in sixteen is wide: more elements than a half-precision reduce-scatter's exact span, so
    # its identity codes repeat (the shape a misplacement by the code period hides in). Drawn for
    # every parameter too; shrinking goes to narrow.
    if draw(_integers(0, size.wide_one_in - 1)) == size.wide_one_in - 1 and size.wide:
        shape = (draw(_integers(1, 3)), draw(_integers(48, 160)))
    layout = "column_major" if strided and len(shape) >= 2 else "contiguous"  # a wide shape has two dims
    view = draw(_sampled(VIEW_KINDS))
    regather = draw(_BOOLEANS) if forced_regather is None else forced_regather
    reduce_op = draw(_sampled(("avg", "sum")))
    own_scope = not expert or draw(_integers(0, 3)) > 0
    # One in eight gathers a cast of itself (a low-precision all-gather: bf16 mixed precision,
    # float8, int8), so one bucket often moves several dtypes; one in sixteen is stored in the
    # drawn dtype instead, when that is one nothing computes in (a frozen float8 or int8 weight,
    # gathered as it is). Both choices are drawn for every parameter, as above; shrinking goes to
    # neither.
    pick, own = draw(_integers(0, 15)), draw(_sampled(WIRES))
    if pick == 13 and own in STORAGE_ONLY:
        dtype, wire = own, ""
    elif pick >= 14:
        wire = own
    wire = wire if wire != dtype else ""
    # Half of the half-precision casts are scaled by a 0-dim float32 gain.
    scaled = wire in SCALABLE and draw(_BOOLEANS)
    return ParamDraw(
        shard_shape=shape, dtype=dtype, view=view, regather=regather, reduce_op=reduce_op,
        expert=expert, own_scope=own_scope, layout=layout, wire=wire, scaled=scaled, strided_group=strided_group)


@functools.lru_cache(maxsize=None)
def _param_strategy(dtype: str, expert_ok: bool, size: Size, forced_regather: bool | None,
                    wire: str, strided_ok: bool = False) -> st.SearchStrategy[ParamDraw]:
    """``param_draws`` with these arguments, one object for all draws (see ``_integers``)."""
    return param_draws(dtype=dtype, expert_ok=expert_ok, size=size, forced_regather=forced_regather, wire=wire,
                       strided_ok=strided_ok)


# Group degrees, weighted by repetition: powers of two mostly (the common meshes), and 3, 5 and 6
# in one draw of three, because a rule written for powers of two (a shift for a division, a mask
# for a remainder) is exact on every power of two and wrong on the others. Hypothesis favours the
# last entry too, so that is the cheapest world; the first is what shrinking moves to.
DEGREES = (2, 4, 8, 3, 4, 5, 8, 6, 2)


# Wires a scaled cast is drawn for: the half-precision ones, where torch's rule for a 0-dim factor
# decides the dtype (a float32 cast times float32 is float32 by any rule; float8 does not promote).
SCALABLE = frozenset({"bfloat16", "float16"})


# Block names in string order of their numbers: each shares a prefix with the next (1, 10, 100, 101...).
PREFIX_SHARING_NAMES = tuple(f"blocks.{i}" for i in sorted(range(1, 1000), key=str)[:200])


@st.composite
def blueprints(draw, size: Size | str = "default", *, degrees: tuple[int, ...] = DEGREES,
               experts: bool = True) -> Blueprint:
    """A blueprint of a graph shaped like the output of the FSDP pass (spec section 1.4)."""
    size = _size(size)
    degree = draw(_sampled(d for d in degrees if d >= size.min_degree))
    expert_degree = 0
    # The last choice, 1, is a one-rank expert group (expert parallelism as wide as the FSDP group
    # leaves the experts' FSDP mesh dim one rank wide): its launches have degree 1, which rule 5 skips.
    expert_degrees = [d for d in (2, 4) if d < degree and degree % d == 0]
    if experts and degree >= 4 and expert_degrees and (size.experts_always or draw(_BOOLEANS)):
        expert_degree = draw(_sampled((*expert_degrees, 1)))
    blocks: list[tuple[ParamDraw, ...]] = []
    for _ in range(draw(_integers(size.min_blocks, size.max_blocks))):
        if size.uniform and blocks:
            blocks.append(blocks[0])
            continue
        dtype = draw(_sampled(size.dtypes))
        count = draw(_integers(size.min_params, size.max_params))
        # One block in six casts every gather to one dtype, as a module's mixed-precision policy does
        # (each parameter may still draw its own cast, or none).
        wire = draw(_sampled(WIRES)) if draw(_integers(0, 5)) == 5 else ""
        blocks.append(tuple(draw(_param_strategy(dtype, bool(expert_degree), size, size.regather, wire,
                                                 expert_degree >= 2))
                            for _ in range(count)))
    prep_chains = draw(_integers(0, 4)) == 0
    # Sometimes blocks named so that one FQN is a prefix of another without a dot boundary
    # (blocks.1, blocks.10, blocks.11): a scope matched by a bare prefix takes the wrong block.
    shared = len(blocks) > 1 and draw(_integers(0, size.prefix_one_in - 1)) == 0
    names = PREFIX_SHARING_NAMES[:len(blocks)] if shared else ()
    return Blueprint(
        blocks=tuple(blocks), degree=degree, expert_degree=expert_degree,
        reshard_after_forward=not draw(_integers(0, 4)) == 0,
        overload=draw(_sampled(("", "default"))),
        device=draw(_sampled(("cuda:0", "cuda:0", "cpu", "meta"))),
        prep_chains=prep_chains, prep=draw(_sampled(PREP_KINDS)) if prep_chains else "own",
        prep_in_halves=prep_chains and draw(_BOOLEANS),
        block_names=names)


@st.composite
def plan_args(draw, blueprint: Blueprint) -> PlanArgs:
    """Mostly the production defaults; sometimes explicit module groups or a policy."""
    plans = None
    choice = draw(_integers(0, 5))
    blocks = [blueprint.block(b) for b in range(len(blueprint.blocks))]
    if choice == 1:
        plans = [blocks[i:i + 2] for i in range(0, len(blocks), 2)]  # pairs of blocks share buckets
    elif choice == 2:
        plans = [[b] for b in blocks]
    elif choice == 3:  # a configured scope no parameter lives under (an unsharded head) as well
        plans = [[b] for b in blocks] + [["unsharded_head"]]
    policy = None
    if draw(_integers(0, 3)) == 0:
        policy = {
            "cap_bytes": draw(_none_or(1, 4096)),
            "max_input_distance": draw(_none_or(0, 40)),
            "max_consumer_distance": draw(_none_or(0, 40)),
        }
    return PlanArgs(module_bucket_plans=plans, policy=policy)


@st.composite
def fsdp_graphs(draw, size: Size | str = "default", **kwargs) -> Case:
    """A valid FSDP-tagged joint graph with plan arguments and an input seed."""
    blueprint = draw(blueprints(size, **kwargs))
    # every choice before the render: a shrink's candidate that runs out of choices stops before it
    args, seed = draw(plan_args(blueprint)), draw(_integers(0, 2**16))
    return Case(render(blueprint), args, seed=seed, label="fsdp_graphs")


MUTATION_KINDS = ("skip", "split", "singleton", "fusion", "args")
# skip has the most reasons; args has 14 variants whose error branches only it reaches; fusion has ten
# shapes, each of a dtype walk or an insertion point few draws reach otherwise
MUTATION_WEIGHTS = {"skip": 3, "split": 3, "singleton": 1, "fusion": 4, "args": 2}
# Reasons that skip every launch of a case come only from mutated_graphs (hazard_graphs plants
# per-launch defects), the parallel-mode rule has several values to reach and the shape rule nine
# branches, and the wait-users rule two variants of which one (a launch read by no wait) was reached
# once or never in 2,000 tiny examples, as was one of the phase rule's: they weigh more.
SKIP_WEIGHTS = {"unsupported_parallel_mode": 20, "outside_module_plan": 2, "unknown_process_group": 2,
                "unknown_or_dynamic_shape": 3, "unsupported_wait_users": 2, "phase_mismatch": 2}
# The two fusion shapes of eight and nine variants each weigh double: with twelve shapes, the ops the
# dtype walk runs on stand-ins were met in 0-14 of 3,000 tiny examples. A gain all-reduced over the
# group weighs double too: as one of eleven scaled-cast forms it was met in 0 of 3,000. So does a cast
# scaled twice: met in 5 of 3,000, and in none once one-rank expert groups joined the draw.
# Gains reduced per row (three forms a dtype walk reads by the shard's real shape) weigh double too,
# and so does a cast far up its member's chain: met in 0 of 3,000 once the per-row gains joined.
# And a cast naming its dtype by keyword: met in 0 of 3,000 once its scaled form joined.
FUSION_WEIGHTS = {"cast_beside_opaque_op": 2, "scaled_cast_forms": 2, "gain_all_reduced": 2, "cast_scaled_twice": 2,
                  "cast_dtype_by_keyword": 2,
                  "per_row_gains": 2, "cast_far_up_the_chain": 2}
# The split reasons of four variants each weigh double: one variant in four of the effect rule (a free
# no member owns) was met in 0 of 3,000 tiny examples once the phase rule had four variants too.
SPLIT_WEIGHTS = {"effect_or_storage_release": 2, "phase_boundary": 2}


# The tables of ``mutations`` that plant a defect for a rule, by the kind of rule.
_TABLES = {"skip": mutations.SKIP_MUTATIONS, "split": mutations.SPLIT_MUTATIONS,
           "singleton": mutations.SINGLETON_MUTATIONS, "fusion": mutations.FUSION_MUTATIONS}


def rule_kind(reason: str) -> str:
    """Which table of ``mutations`` plants a defect for ``reason`` (``REASON`` or ``REASON/VARIANT``)."""
    reason = reason.partition("/")[0]
    for kind, table in _TABLES.items():
        if reason in table:
            return kind
    raise ValueError(f"no mutation plants {reason!r}: pick one of {sorted(mutations.SKIP_MUTATIONS)}, "
                     f"{sorted(mutations.SPLIT_MUTATIONS)}, {sorted(mutations.SINGLETON_MUTATIONS)} "
                     f"or {sorted(mutations.FUSION_MUTATIONS)}")


@st.composite
def mutated_graphs(draw, size: Size | str = "default", *, kinds: tuple[str, ...] = MUTATION_KINDS,
                   reason: Optional[str] = None, **kwargs) -> Case:
    """A valid graph with one targeted defect (a skip, split or singleton trigger, or bad args), or
    one fusion the rewriter must handle with care; ``reason`` pins the skip, split, singleton or
    fusion reason (a planted bug in one rule is hunted with it); ``REASON/VARIANT`` pins one variant of it,
    for a bug only that variant's shape tells (one variant in nine is nine times the examples)."""
    pinned = None
    if reason is not None and "/" in reason:
        reason, pinned = pinned_variant(reason)
    blueprint = draw(blueprints(size, **kwargs))
    case = Case(render(blueprint), PlanArgs(), seed=draw(_integers(0, 2**16)))
    kind = rule_kind(reason) if reason else \
        draw(_sampled([k for k in kinds for _ in range(MUTATION_WEIGHTS[k])]))
    if kind == "args":
        name = draw(_sampled(sorted(mutations.ARG_MUTATIONS)))
        return replace(case.with_args(**mutations.ARG_MUTATIONS[name]), label=f"args:{name}")
    if kind == "skip":
        reason = reason or draw(_sampled([r for r in sorted(mutations.SKIP_MUTATIONS)
                                                 for _ in range(SKIP_WEIGHTS.get(r, 1))]))
        variant = pinned or draw(_sampled(mutations.SKIP_MUTATIONS[reason]))
        sites = mutations.launches(case.graph)
    else:
        table = _TABLES[kind]
        reason = reason or draw(_sampled([r for r in sorted(table)
                                                 for _ in range(FUSION_WEIGHTS.get(r, 1) if kind == "fusion"
                                                                else SPLIT_WEIGHTS.get(r, 1))]))
        variant = pinned or draw(_sampled(table[reason]))
        if getattr(variant, "gathered_ahead", False) and (blueprint.reshard_after_forward or len(blueprint.blocks) < 2):
            # the shape needs gathers issued ahead of their consumers: drawn as such, not left to
            # the one blueprint in five that has them (a rewriter bug there went unfound in 60 s)
            blueprint = _gathered_ahead(blueprint)
            case = replace(case, graph=render(blueprint))
        cast = getattr(variant, "needs_cast", None)
        if cast in _CAST_PAIRS:  # two cast members in one bucket
            blueprint = _with_cast_pair(blueprint, *_CAST_PAIRS[cast])
            case = replace(case, graph=render(blueprint))
        elif cast is not None:  # the shape acts on a (scaled) cast: one in a few dozen params
            blueprint = _with_cast(blueprint, scaled=cast is mutations.Cast.SCALED,
                                   rows=getattr(variant, "needs_rows", None))
            case = replace(case, graph=render(blueprint))
        sites = mutations.sibling_pairs(case.graph)
    sites = [site for site in sites if mutations.fits(variant, case, site)]
    planted = {}
    if kind == "fusion":  # a fusion shape fits few sibling pairs: draw among those it fits
        planted = {site: variant(case, *site) for site in sites}
        sites = [site for site in sites if planted[site] is not None]
    if not sites:
        return replace(case, label="fsdp_graphs")
    site = sites[draw(_integers(0, len(sites) - 1))]
    mutated = planted.get(site) or (variant(case, *site) if isinstance(site, tuple) else variant(case, site))
    if mutated is None or not edit.in_order(mutated.graph):  # a planted defect never breaks the graph itself
        return replace(case, label="fsdp_graphs")
    where = "/".join(site) if isinstance(site, tuple) else site
    return replace(mutated, label=f"{kind}:{reason}:{variant.__name__}@{where}")


def pinned_variant(hunt: str) -> tuple[str, Callable]:
    """``REASON/VARIANT`` as the reason and the variant's function; an unknown one names the choices."""
    reason, _, name = hunt.partition("/")
    table = _TABLES[rule_kind(reason)]
    for variant in table[reason]:
        if variant.__name__ == name:
            return reason, variant
    raise ValueError(f"{reason!r} has no variant {name!r}: pick one of {sorted(v.__name__ for v in table[reason])}")


def _with_cast(blueprint: Blueprint, scaled: bool, rows: Optional[mutations.Rows] = None) -> Blueprint:
    """``blueprint`` with the first parameter of a block of two or more gathered as a half-precision
    cast (of another dtype than its own), times its gain when ``scaled`` (as drawn, when one is);
    ``rows``: of the first such block whose parameter's shard has those rows, or, where none has,
    of the first parameter reshaped so (a shape acting on per-row gains was met once in hundreds of
    examples otherwise)."""
    blocks = list(blueprint.blocks)
    if rows is not None and not any(param.wire and param.scaled == scaled for block in blocks for param in block):
        castable = [index for index, block in enumerate(blocks) if len(block) > 1 and not block[0].frozen]
        fitting = [index for index in castable if rows.fits(blocks[index][0].shard_shape)]
        if fitting:  # that block first: the loop below casts it
            blocks = [blocks[fitting[0]], *blocks[:fitting[0]], *blocks[fitting[0] + 1:]]
        elif castable:
            index = castable[0]
            shape = (blocks[index][0].shard_shape[0], 2 if rows is mutations.Rows.WIDE else 1)
            blocks[index] = (replace(blocks[index][0], shard_shape=shape, view="flat"), *blocks[index][1:])
        return _with_cast(replace(blueprint, blocks=tuple(blocks)), scaled)
    for index, block in enumerate(blocks):
        if any(param.wire and param.scaled == scaled for param in block):
            return blueprint
        if len(block) > 1 and not block[0].frozen:
            wire = "float16" if block[0].dtype == "bfloat16" else "bfloat16"
            blocks[index] = (replace(block[0], wire=wire, scaled=scaled), *block[1:])
            return replace(blueprint, blocks=tuple(blocks))
    return blueprint


# The two wires each pair kind of cast gives a block's first two parameters (None: a half-precision one).
_CAST_PAIRS = {mutations.Cast.PAIR: ("uint8", None), mutations.Cast.WIDE_PAIR: ("int32", None),
               mutations.Cast.FLOAT8_VENDORS: ("float8_e4m3fnuz", "float8_e4m3fn"),
               mutations.Cast.FLOAT8_AMD: ("float8_e4m3fnuz", "float8_e5m2fnuz")}


def _with_cast_pair(blueprint: Blueprint, first: str = "uint8", second: Optional[str] = None) -> Blueprint:
    """``blueprint`` with the first two parameters of a block gathered as casts: ``first`` (packed
    4-bit weights in uint8 or int32, or a float8 format) and a half-precision one (or ``second``).
    For uint8 every member of their bucket moves a narrower dtype than the parameters' (the wire is
    neither the parameters' dtype nor either member's alone: bf16 holds all 256 values); for int32
    only float64 holds both."""
    blocks = list(blueprint.blocks)
    for index, block in enumerate(blocks):
        if len(block) > 1 and not block[0].frozen and not block[1].frozen:
            half = "float16" if "bfloat16" in (block[0].dtype, block[1].dtype) else "bfloat16"
            if first == "int32":  # int32 codes (up to 2**31) unpacked into float16 would overflow:
                # the block's parameters float32 (the pair stays one spec dtype, so one bucket)
                block = tuple(replace(param, dtype="float32") if param.dtype == "float16" else param
                              for param in block)
                half = "float16" if "bfloat16" in (block[0].dtype, block[1].dtype) else "bfloat16"
            blocks[index] = (replace(block[0], wire=first, scaled=False),
                             replace(block[1], wire=second or half, scaled=False),
                             *block[2:])
            return replace(blueprint, blocks=tuple(blocks))
    return blueprint


def _gathered_ahead(blueprint: Blueprint) -> Blueprint:
    """``blueprint`` with its gathers issued ahead of their consumers (no reshard after forward), and
    a second block where it has one: the shape needs another block's gather to wait for."""
    blocks = blueprint.blocks if len(blueprint.blocks) > 1 else blueprint.blocks * 2
    names = blueprint.block_names and PREFIX_SHARING_NAMES[:len(blocks)]
    return replace(blueprint, reshard_after_forward=False, blocks=blocks, block_names=names)


@st.composite
def hazard_graphs(draw, size: Size | str = "default", max_hazards: int = 8, **kwargs) -> Case:
    """A valid graph with several planted hazards (barriers, foreign collectives and frees, phase
    flips, late sources, broken tags) at distinct sites: more chances per example to trip a
    buggy planner; shrinking then removes the hazards that do not matter."""
    blueprint = draw(blueprints(size, **kwargs))
    args, seed = draw(plan_args(blueprint)), draw(_integers(0, 2**16))
    case = Case(render(blueprint), args, seed=seed)
    used: set[str] = set()
    labels = []
    for _ in range(draw(_integers(1, max_hazards))):
        if draw(_BOOLEANS):
            reason = draw(_sampled(sorted(mutations.SPLIT_MUTATIONS)))
            variant = draw(_sampled(mutations.SPLIT_MUTATIONS[reason]))
            sites = mutations.sibling_pairs(case.graph)
        else:
            reason, variant = draw(_sampled(_HAZARD_SKIPS))
            sites = mutations.launches(case.graph)
        sites = [s for s in sites if mutations.fits(variant, case, s)
                 and not used & set(s if isinstance(s, tuple) else (s,))]
        if not sites:
            continue
        site = sites[draw(_integers(0, len(sites) - 1))]
        mutated = variant(case, *site) if isinstance(site, tuple) else variant(case, site)
        if mutated is not None and edit.in_order(mutated.graph):
            case = mutated
            used |= set(site if isinstance(site, tuple) else (site,))
            labels.append(f"{reason}:{variant.__name__}")
    return replace(case, label="hazards:" + ",".join(labels))


_GLOBAL_SKIPS = {"unsupported_parallel_mode", "outside_module_plan", "unknown_process_group"}
# One draw over every variant (one per branch of a rule), not reason then variant: a hazard case
# plants several, so each branch of the rules with many (identity, shapes) is reached often.
_HAZARD_SKIPS = [(reason, variant) for reason in sorted(mutations.SKIP_MUTATIONS) if reason not in _GLOBAL_SKIPS
                 for variant in mutations.SKIP_MUTATIONS[reason]]


def cases(size: Size | str = "default", *, modules: bool = False) -> st.SearchStrategy[Case]:
    """What a fuzz campaign draws from: valid and mutated graphs, and, with ``modules``, traced models."""
    sources = [fsdp_graphs(size), mutated_graphs(size), mutated_graphs(size), hazard_graphs(size)]
    if modules:
        from fsdp_verify.strategies.modules import graphs_from_modules
        sources.append(graphs_from_modules())
    # Some cases shard unevenly: their ranks' graphs differ, so rank-local decisions are seen.
    return sometimes_uneven(st.one_of(*sources))
