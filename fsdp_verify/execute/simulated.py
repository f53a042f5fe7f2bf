"""A simulated N-rank world: one ``torch.fx.Interpreter`` per rank, stepped in lockstep.

Collectives are emulated exactly (spec section 5.1): all-gather concatenates the subgroup's
inputs in group-rank order; reduce-scatter and all-reduce reduce element-wise in a fixed
rank order. A launch returns a handle; a rank blocks at the wait until every member of its
subgroup has issued the matching launch. Frees release storage for real, so a read of freed
storage raises ``ReadAfterFree`` naming the reader; ranks whose collective streams differ
raise ``Desync`` with the first diverging position per group, never hang.

A collective reads its send buffer (and an ``out=`` launch writes its output) asynchronously,
between the launch and the wait. A rank that frees such storage in that window raises
``FreedInFlight``, naming the free and the launch; and every tensor the world reads or writes on
a rank's behalf is checked to own its storage first, so no target can make the simulator read
freed memory (a read of a zero-sized storage through a tensor's old shape is no error in torch:
it reads whatever the allocator left there, or crashes the process).
"""

from __future__ import annotations

import contextlib
import functools
import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from typing import AbstractSet, Any, Callable, Iterator, Mapping, NamedTuple, Optional

import torch
from torch import fx
from torch.fx.node import map_arg
from torch.utils._pytree import tree_flatten

from fsdp_verify.graph import collectives
from fsdp_verify.graph.ops import is_free_target

GroupResolver = Callable[[int, str], tuple[int, ...]]


class SimulationError(RuntimeError):
    """A failure the simulated world detected (not a crash of the harness)."""


class ReadAfterFree(SimulationError):
    """A node read a tensor whose storage an earlier free released."""

    def __init__(self, rank: int, reader: str, freed: str):
        self.rank, self.reader, self.freed = rank, reader, freed
        super().__init__(f"rank {rank}: node {reader!r} reads {freed!r}, whose storage was already freed")


class FreedInFlight(ReadAfterFree):
    """A rank freed storage that one of its launched collectives still reads or writes."""

    def __init__(self, rank: int, free: str, launch: str):
        SimulationError.__init__(self, f"rank {rank}: {free!r} frees storage that collective {launch!r} still "
                                       f"reads or writes (it was launched and not yet waited on)")
        self.rank, self.reader, self.freed, self.free, self.launch = rank, launch, free, free, launch


def owns_storage(tensor: torch.Tensor) -> bool:
    """Whether every element ``tensor`` addresses lies inside its storage (a freed storage has size 0)."""
    if tensor.numel() == 0:
        return True
    extent = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.untyped_storage().nbytes() >= (tensor.storage_offset() + extent) * tensor.element_size()


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


@dataclass(frozen=True)
class CollectiveRecord:
    """What one rank launched: enough to compare streams across ranks."""

    op: str
    group: str
    shape: tuple[int, ...]
    dtype: str
    reduce_op: Optional[str]
    node: str

    def signature(self) -> tuple:
        """The fields every member of a subgroup must agree on."""
        return (self.op, self.shape, self.dtype, self.reduce_op)

    def describe(self) -> str:
        """``op(group, shape, dtype[, reduce op])`` at node."""
        extra = f", {self.reduce_op}" if self.reduce_op else ""
        return f"{self.op}({self.group}, {list(self.shape)}, {self.dtype}{extra}) at {self.node}"


class Desync(SimulationError):
    """Ranks issued different collective streams on a group (a real run would hang or corrupt)."""

    def __init__(self, group: str, position: int, per_rank: Mapping[int, Optional[CollectiveRecord]]):
        self.group, self.position, self.per_rank = group, position, dict(per_rank)
        lines = ", ".join(f"rank {r}: {rec.describe() if rec else 'nothing'}" for r, rec in sorted(per_rank.items()))
        super().__init__(f"desync on group {group!r} at collective #{position}: {lines}")

    def differs(self) -> str:
        """The kinds of collective the ranks issued where they part (``nothing`` where a rank issued
        none): two gathers issued in another order on one rank part on a gather whatever their shapes
        or dtypes, so one such bug is one cause, while a gather against a scatter is another."""
        records = list(self.per_rank.values())
        if not records or any(record is None for record in records):
            return "nothing"
        return "|".join(sorted({record.op for record in records}))


class Deadlock(SimulationError):
    """Every unfinished rank is blocked at a wait whose collective another blocked rank has not launched:
    the streams agree, but the order of the ranks' waits admits no schedule (a real run hangs)."""

    def __init__(self, cycle: list[tuple[int, str, str, int, int]]):
        self.cycle = cycle  # (rank, wait node, group, position, rank it waits for)
        steps = "; ".join(f"rank {r} waits at {w} for {g} #{k}, which rank {o} has not launched"
                          for r, w, g, k, o in cycle)
        super().__init__(f"deadlock: {steps}")


@dataclass
class _Slot:
    ranks: tuple[int, ...]
    requests: dict[int, tuple[CollectiveRecord, torch.Tensor]] = field(default_factory=dict)
    results: Optional[dict[int, torch.Tensor]] = None


@dataclass(frozen=True)
class _Handle:
    key: tuple


def _reduce(tensors: list[torch.Tensor], op: str) -> torch.Tensor:
    acc = tensors[0].clone()
    for tensor in tensors[1:]:
        if op in ("sum", "avg"):
            acc = acc + tensor
        elif op == "max":
            acc = torch.maximum(acc, tensor)
        elif op == "min":
            acc = torch.minimum(acc, tensor)
        elif op == "product":
            acc = acc * tensor
        else:
            raise SimulationError(f"unsupported reduce op {op!r}")
    return acc / len(tensors) if op == "avg" else acc


def _bind(target: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The arguments of a c10d call by schema name (positional and keyword alike)."""
    overload = target if isinstance(target, torch._ops.OpOverload) else target.default
    names = [arg.name for arg in overload._schema.arguments]
    return {**dict(zip(names, args)), **kwargs}


class World:
    """The collective state shared by the ranks of one simulated run."""

    def __init__(self, resolve: GroupResolver):
        self.resolve = resolve
        self.slots: dict[tuple, _Slot] = {}
        self.counters: dict[tuple[int, str, tuple], int] = {}
        self.streams: dict[int, list[CollectiveRecord]] = {}
        self.frees: dict[tuple[int, int], str] = {}  # (rank, storage) -> the free node that released it

    def _owned(self, rank: int, tensor: torch.Tensor, node: str) -> None:
        """Raise rather than read or write storage that ``rank`` freed (``node`` is the collective)."""
        if not owns_storage(tensor):
            free = self.frees.get((rank, _storage_key(tensor)), "a free")
            raise ReadAfterFree(rank, node, free)

    def launch(self, rank: int, node: fx.Node, target: Any, args: tuple, kwargs: dict, op: str | None = None,
               tensor: torch.Tensor | None = None) -> _Handle:
        bound = _bind(target, args, kwargs)
        op = op or str(target).split(".")[1]
        tensor = args[0] if tensor is None else tensor
        group = bound.get("group_name")
        if not isinstance(group, str):
            raise SimulationError(f"node {node.name!r}: group {group!r} is not a group name")
        try:
            ranks = self.resolve(rank, group)
        except KeyError:
            raise SimulationError(f"node {node.name!r}: unknown process group {group!r}") from None
        reduce_op = bound.get("reduce_op")
        record = CollectiveRecord(op, group, tuple(tensor.shape), str(tensor.dtype), reduce_op, node.name)
        self.streams.setdefault(rank, []).append(record)
        position = self.counters.get((rank, group, ranks), 0)
        self.counters[(rank, group, ranks)] = position + 1
        key = (group, ranks, position)
        slot = self.slots.setdefault(key, _Slot(ranks))
        slot.requests[rank] = (record, tensor)
        if len(slot.requests) == len(ranks):
            self._complete(key, slot)
        return _Handle(key)

    def _complete(self, key: tuple, slot: _Slot) -> None:
        records = {r: slot.requests[r][0] for r in slot.ranks}
        if len({rec.signature() for rec in records.values()}) != 1:
            raise Desync(key[0], key[2], records)
        first = records[slot.ranks[0]]
        for r in slot.ranks:
            self._owned(r, slot.requests[r][1], records[r].node)
        inputs = [slot.requests[r][1] for r in slot.ranks]
        if first.op == "all_gather_into_tensor":
            gathered = torch.cat(inputs, dim=0)
            slot.results = {r: gathered.clone() for r in slot.ranks}
        elif first.op == "reduce_scatter_tensor":
            chunks = _reduce(inputs, first.reduce_op).chunk(len(slot.ranks), dim=0)
            slot.results = {r: chunks[i].clone() for i, r in enumerate(slot.ranks)}
        elif first.op == "all_reduce":
            reduced = _reduce(inputs, first.reduce_op)
            slot.results = {r: reduced.clone() for r in slot.ranks}
        else:
            raise SimulationError(f"the simulated world does not emulate {first.op}")

    def ready(self, handle: _Handle) -> bool:
        return self.slots[handle.key].results is not None

    def result(self, rank: int, handle: Any) -> torch.Tensor:
        if isinstance(handle, _OutHandle):
            self._owned(rank, handle.out, self.slots[handle.handle.key].requests[rank][0].node)
            return handle.out.copy_(self.slots[handle.handle.key].results[rank].reshape(handle.out.shape))
        return self.slots[handle.key].results[rank]

    def desync(self) -> Desync:
        """The first diverging position of the first group whose streams disagree."""
        for key, slot in sorted(self.slots.items(), key=lambda item: (item[0][0], item[0][2])):
            if slot.results is None:
                per_rank = {r: slot.requests[r][0] if r in slot.requests else None for r in slot.ranks}
                return Desync(key[0], key[2], per_rank)
        return Desync("?", -1, {})


_COLLECTIVES = {"all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"}
_VARIANTS = {"all_gather_into_tensor_out": "all_gather_into_tensor",
             "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
             "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor"}


@dataclass(frozen=True)
class _OutHandle:
    """A launch that writes into a caller-supplied ``out`` tensor (``*_out`` variants)."""

    handle: _Handle
    out: torch.Tensor


def _op_of(target: Any) -> Optional[str]:
    return collectives.op_name(target)


_remembered_op = functools.cache(_op_of)


def _c10d_op(target: Any) -> Optional[str]:
    """The functional-collective op a target calls (``wait_tensor``, ...), or None; remembered per
    target, since every node of every run asks (an unhashable target is asked anew each time)."""
    try:
        return _remembered_op(target)
    except TypeError:
        return _op_of(target)


class Kind(IntEnum):
    """What a node is to the stepping loop (an int, so the loop's comparisons stay cheap)."""

    CALL = 0  # an ordinary call: its reads are checked against freed storage
    FREE = 1  # releases storage (a free may not release what a launch still uses)
    WAIT = 2  # may block until its launch completes on every rank
    COLLECTIVE = 3  # a functional collective launch, through the shared World
    VARIANT = 4  # an ``*_out`` or ``*_coalesced`` launch
    OUTPUT = 5
    OTHER = 6  # placeholders, attributes, modules and methods: the interpreter's own methods
    SEEDED = 7  # an ordinary call that draws from the global random generator (rand, dropout)


_CALL, _FREE, _WAIT, _COLLECTIVE, _VARIANT, _OUTPUT, _OTHER, _SEEDED = tuple(Kind)


def draws(target: Any) -> bool:
    """Whether a call of ``target`` draws from the global random generator: an overload torch tags
    ``nondeterministic_seeded``, or a packet any of whose overloads it tags so."""
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.nondeterministic_seeded in target.tags
    if isinstance(target, torch._ops.OpOverloadPacket):
        return any(torch.Tag.nondeterministic_seeded in getattr(target, name).tags for name in target.overloads())
    return False


def rank_seed(rank: int) -> int:
    """The seed of ``rank``'s own random generators: each world run starts every rank's from it, so a
    rank's draws are its own and repeat in every world that runs its random ops in the same order."""
    return zlib.crc32(f"0:{rank}:generator".encode())


def _global_generators() -> list[torch.Generator]:
    """torch's CPU generator, and the current CUDA device's where CUDA has started."""
    found = [torch.default_generator]
    if torch.cuda.is_initialized():
        found.append(torch.cuda.default_generators[torch.cuda.current_device()])
    return found


class RankGenerators:
    """One rank's random state, swapped into torch's global generators around each of its random
    ops. Ranks step in lockstep, so with one shared generator a rank's draws would depend on how the
    world interleaves the ranks, which a rewrite changes; and a run would move the generators the
    caller (and the target) see. Per rank, the draws repeat exactly where the rank runs its random
    ops in the same order, and a rewrite that reorders, drops or repeats one changes them."""

    def __init__(self, seed: int):
        self.seed = seed
        self.states: dict[str, torch.Tensor] = {}  # by device: each generator's state between draws

    @contextlib.contextmanager
    def drawing(self) -> Iterator[None]:
        generators = _global_generators()
        outside = [generator.get_state() for generator in generators]
        for generator in generators:
            state = self.states.get(str(generator.device))
            if state is None:
                generator.manual_seed(self.seed)
            else:
                generator.set_state(state)
        try:
            yield
        finally:
            for generator, state in zip(generators, outside):
                self.states[str(generator.device)] = generator.get_state()
                generator.set_state(state)


class Step(NamedTuple):
    """One node of a rank's program: what the stepping loop would otherwise work out per rank
    (a NamedTuple, so the hot loop unpacks it as fast as a plain tuple)."""

    node: fx.Node
    kind: Kind
    op: Optional[str]  # the c10d op, for collectives and waits
    reads: tuple  # the nodes it reads
    deaths: tuple  # the values that die after it
    waits_on: Optional[fx.Node]  # the launch a wait may block on


def _call_kind(target: Any) -> tuple[Kind, Optional[str]]:
    op = _c10d_op(target)
    if op == "wait_tensor":
        return _WAIT, op
    if op in _COLLECTIVES:
        return _COLLECTIVE, op
    if op in _VARIANTS:
        return _VARIANT, op
    if is_free_target(target):
        return _FREE, op
    return (_SEEDED if draws(target) else _CALL), op


_remembered_kind = functools.cache(_call_kind)


def _kind(node: fx.Node) -> tuple[Kind, Optional[str]]:
    if node.op == "output":
        return _OUTPUT, None
    if node.op != "call_function":
        return _OTHER, None
    try:
        return _remembered_kind(node.target)
    except TypeError:  # an unhashable target
        return _call_kind(node.target)


def program(module: fx.GraphModule) -> list[Step]:
    """One step per node, in graph order: what every rank running ``module`` would otherwise work
    out node by node (``fx.Interpreter`` per rank: last uses, argument walks)."""
    nodes = list(module.graph.nodes)
    seen: set[fx.Node] = set()
    deaths: dict[fx.Node, list[fx.Node]] = {}
    for node in reversed(nodes):  # a value dies after its last user
        for source in node._input_nodes:
            if source not in seen:
                seen.add(source)
                deaths.setdefault(node, []).append(source)
    steps = []
    for node in nodes:
        kind, op = _kind(node)
        waits_on = node.args[0] if kind == _WAIT and node.args and isinstance(node.args[0], fx.Node) else None
        steps.append(Step(node, kind, op, tuple(node.all_input_nodes), tuple(deaths.get(node, ())), waits_on))
    return steps


class RankInterpreter(fx.Interpreter):
    """Runs one rank's graph; collectives go through the shared World. ``steps`` (the program,
    shared by ranks that run one module) replaces ``fx.Interpreter.run``; the interpreter's own
    methods serve placeholders, attributes, modules and methods."""

    def __init__(self, module: fx.GraphModule, rank: int, world: World, steps: list[Step],
                 observe: Optional[Callable[[int, fx.Node, tuple, Any], None]] = None,
                 override: Optional[Callable[[int, fx.Node, Any], Any]] = None,
                 watch: Optional[AbstractSet[str]] = None, overridden: Optional[AbstractSet[str]] = None):
        super().__init__(module, garbage_collect_values=False)  # ``steps`` knows the last uses
        self.rank, self.world, self.program = rank, world, steps
        self.observe, self.override = observe, override
        self.watch = watch  # None: observe every node; else only these (the inputs tuple costs)
        self.overridden = overridden  # None: ``override`` sees every node; else only these
        self.executed = 0
        self.sizes: dict[str, int] = {}  # bytes of each node's tensor result (aliases included)
        self.blocked: Optional[tuple[str, tuple]] = None  # (wait node, slot key) while blocked
        self.in_flight: dict[int, tuple[str, tuple]] = {}  # storage -> (launch, slot key) until its wait
        self.generators = RankGenerators(rank_seed(rank))

    def _variant(self, node: fx.Node, target: Any, op: str, args: tuple, kwargs: dict) -> Any:
        """``*_out`` writes into ``out``; ``*_coalesced`` is one collective per input."""
        base = _VARIANTS[op]
        if op.endswith("_out"):
            handle = self.world.launch(self.rank, node, target, args, kwargs, base)
            self._fly(node, args[0], handle)
            self._fly(node, kwargs["out"], handle)
            return _OutHandle(handle, kwargs["out"])
        handles = [self.world.launch(self.rank, node, target, args, kwargs, base, tensor) for tensor in args[0]]
        for tensor, handle in zip(args[0], handles):
            self._fly(node, tensor, handle)
        return handles

    def _fly(self, node: fx.Node, tensor: Any, handle: Any) -> None:
        """``tensor``'s storage is read (or written) by the launch ``node`` until its wait."""
        if isinstance(tensor, torch.Tensor) and isinstance(handle, _Handle):
            self.in_flight[_storage_key(tensor)] = (node.name, handle.key)

    def _land(self, handle: Any) -> None:
        """The wait on ``handle`` has returned: its storages are the rank's own again."""
        key = handle.handle.key if isinstance(handle, _OutHandle) else getattr(handle, "key", None)
        if self.in_flight and key is not None:
            for storage in [s for s, (_, k) in self.in_flight.items() if k == key]:
                del self.in_flight[storage]

    def _free(self, node: fx.Node, args: tuple) -> None:
        """A free may not release storage a launched collective still uses; the world remembers
        which free released what, to name it if a peer's collective later reads it."""
        for tensor in args:
            if isinstance(tensor, torch.Tensor):
                storage = _storage_key(tensor)
                if storage in self.in_flight:
                    raise FreedInFlight(self.rank, node.name, self.in_flight[storage][0])
                if tensor.untyped_storage().nbytes():
                    self.world.frees[(self.rank, storage)] = node.name

    def _check_reads(self, node: fx.Node, reads: tuple) -> None:
        """Every tensor the node reads (an input node's value, or the tensors of a list value) must
        still own storage; the input nodes are walked directly, not the flattened arguments."""
        env = self.env
        for source in reads:
            value = env.get(source)
            for tensor in (value if isinstance(value, (list, tuple)) else (value,)):
                if isinstance(tensor, torch.Tensor) and tensor.numel() and tensor.untyped_storage().size() == 0:
                    raise ReadAfterFree(self.rank, node.name, source.name)

    def steps(self, inputs: list[Any]) -> Iterator[Optional[Any]]:
        """Run node by node; yields None while blocked at a wait, then the outputs."""
        self.args_iter = iter(inputs)
        env, world, rank, sizes = self.env, self.world, self.rank, self.sizes
        fetch = env.__getitem__
        observe, override, watch, overridden = self.observe, self.override, self.watch, self.overridden
        for node, kind, op, reads, deaths, waits_on in self.program:
            if waits_on is not None:
                handle = env.get(waits_on)
                handle = handle.handle if isinstance(handle, _OutHandle) else handle
                while isinstance(handle, _Handle) and not world.ready(handle):
                    self.blocked = (node.name, handle.key)
                    yield None
                self.blocked = None
            args, kwargs = map_arg(node.args, fetch), map_arg(node.kwargs, fetch)
            if kind == _CALL:
                self._check_reads(node, reads)
                value = node.target(*args, **kwargs)
            elif kind == _SEEDED:
                self._check_reads(node, reads)
                with self.generators.drawing():
                    value = node.target(*args, **kwargs)
            elif kind == _FREE:  # idempotent: freeing freed storage is no read
                self._free(node, args)
                value = node.target(*args, **kwargs)
            elif kind == _WAIT:
                value = args[0] if args else kwargs.get("tensor")
                if isinstance(value, (_Handle, _OutHandle)):
                    self._land(value)
                    value = world.result(rank, value)
            elif kind == _COLLECTIVE:
                self._check_reads(node, reads)
                value = world.launch(rank, node, node.target, args, kwargs)
                self._fly(node, args[0] if args else kwargs.get("input"), value)
            elif kind == _VARIANT:
                self._check_reads(node, reads)
                value = self._variant(node, node.target, op, args, kwargs)
            elif kind == _OUTPUT:
                self._check_reads(node, reads)
                value = args[0]
            else:
                value = getattr(self, node.op)(node.target, args, kwargs)
            if override is not None and (overridden is None or node.name in overridden):
                value = override(rank, node, value)
            env[node] = value
            self.executed += 1
            if isinstance(value, torch.Tensor):
                sizes[node.name] = value.numel() * value.element_size()
            if observe is not None and (watch is None or node.name in watch):
                observe(rank, node, tuple(env[a] for a in reads if a in env), value)
            for dead in deaths:
                del env[dead]
            if kind == _OUTPUT:
                yield value
                return


def _stuck(world: World, blocked: Mapping[int, RankInterpreter]) -> SimulationError:
    """Why no rank can move: a cycle of blocked ranks is a deadlock; a rank that will never launch
    the awaited collective (finished, or not a member) is a desync."""
    waits_for: dict[int, tuple[str, str, int, int]] = {}
    for rank, interp in blocked.items():
        if interp.blocked is None:
            return world.desync()
        wait, key = interp.blocked
        slot = world.slots[key]
        missing = [r for r in slot.ranks if r not in slot.requests]
        if not missing or missing[0] not in blocked:
            return world.desync()
        waits_for[rank] = (wait, key[0], key[2], missing[0])
    rank, seen = min(waits_for), []
    while rank not in seen:
        seen.append(rank)
        rank = waits_for[rank][3]
    cycle = seen[seen.index(rank):]
    return Deadlock([(r, *waits_for[r]) for r in cycle])


@dataclass
class WorldRun:
    """Outputs per rank (flattened), each rank's collective stream, and the bytes of every tensor
    a node produced on each rank (what a liveness walk needs, from the same run)."""

    outputs: dict[int, list[Any]]
    streams: dict[int, list[CollectiveRecord]]
    sizes: dict[int, dict[str, int]] = field(default_factory=dict)


def run_world(modules: Mapping[int, fx.GraphModule], inputs: Mapping[int, list[Any]], resolve: GroupResolver,
              observe: Optional[Callable[[int, fx.Node, tuple, Any], None]] = None,
              override: Optional[Callable[[int, fx.Node, Any], Any]] = None,
              watch: Optional[AbstractSet[str]] = None, overridden: Optional[AbstractSet[str]] = None) -> WorldRun:
    """Run every rank's module to completion in lockstep; raises Desync or ReadAfterFree.

    ``observe(rank, node, inputs, result)`` sees every node run (only the nodes named in ``watch``
    when given); ``override(rank, node, value)`` may replace a node's value (identity tensors for
    the layout oracle; only the nodes named in ``overridden`` when given).
    """
    with one_thread():
        return _run_world(modules, inputs, resolve, observe, override, watch, overridden)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch intra-op threads off for the run: the simulated tensors are tiny, and on a loaded
    machine a parallel op's thread team costs milliseconds where the op costs microseconds
    (measured: simulated runs 14x faster with one thread on 2 shared cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_world(modules: Mapping[int, fx.GraphModule], inputs: Mapping[int, list[Any]], resolve: GroupResolver,
               observe: Optional[Callable[[int, fx.Node, tuple, Any], None]],
               override: Optional[Callable[[int, fx.Node, Any], Any]],
               watch: Optional[AbstractSet[str]], overridden: Optional[AbstractSet[str]]) -> WorldRun:
    world = World(resolve)
    programs: dict[int, list[Step]] = {}  # by id(module): ranks may share one
    for module in modules.values():
        if id(module) not in programs:
            programs[id(module)] = program(module)
    interpreters = {rank: RankInterpreter(module, rank, world, programs[id(module)], observe, override, watch,
                                          overridden) for rank, module in modules.items()}
    runners = {rank: interp.steps(list(inputs[rank])) for rank, interp in interpreters.items()}
    outputs: dict[int, list[Any]] = {}
    while runners:
        before = sum(interp.executed for interp in interpreters.values())
        for rank in list(runners):
            value = next(runners[rank])
            if value is not None:  # finished: the generator yielded the outputs
                outputs[rank] = tree_flatten(value)[0]
                del runners[rank]
        if runners and sum(interp.executed for interp in interpreters.values()) == before:
            raise _stuck(world, {rank: interpreters[rank] for rank in runners})
    if any(slot.results is None for slot in world.slots.values()):
        raise world.desync()
    return WorldRun(outputs, world.streams, {rank: interp.sizes for rank, interp in interpreters.items()})


__all__ = ["CollectiveRecord", "Deadlock", "Desync", "FreedInFlight", "RankGenerators", "ReadAfterFree", "RankInterpreter",
           "SimulationError", "World", "WorldRun", "draws", "rank_seed", "run_world"]
