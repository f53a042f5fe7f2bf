"""Identity tensors: every collective source carries codes that name (parameter, rank, element),
and one run of each world serves every checker that reads a simulation.

The run is the numeric run too (one simulation per world, not one per question): its
placeholders hold the case's inputs, and each tagged collective's source is replaced by codes
that are also ordinary numbers. The numerics checker compares that run's outputs, and the
sources' own values as computed before replacement (so a rewrite that changes how a source is
computed cannot hide behind its codes).

All-gather codes only move, so they need distinct bit patterns, decodable back to parameter,
rank and element. Integer codes are every value of their type (up to 2**31 for int32: the draws
unpack those into bf16 or wider, never float16). Float codes are also finite, of either sign and
below 1 in magnitude (like the inputs), so the computations downstream stay meaningful: a counter's
low mantissa bits are multiplied by an odd constant into the top of the mantissa (a bijection that
spreads neighbours apart), its higher bits pick a binade (``[0.5, 1)`` first, then smaller ones:
``_FORMATS`` says per dtype how many before the codes repeat) and a hash of it the sign.
Reduce-scatter codes are integers up to a span small enough that a sum over the group stays
exact in the source's dtype, scaled by a power of two into ``(0, 1]``: a sum is then the same in
whatever order the ranks are added, and a misplaced or missing contribution changes it.

Codes keep their source's strides. A source that shares storage (a view, or its node's input
itself) would lose its aliasing in codes of its own: a later free or in-place write of the storage
it shares, through another node, would go unseen. The run records such sources where the graph
has such an effect (``aliased``: an effect reading the storage other than through the source), and
the numerics checker then compares plain runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import fx

from fsdp_verify.graph.builder import HEADER_KEY
from fsdp_verify.graph.spec import CASTS, cast_dtype
from fsdp_verify.graph.values import dtype_from_name
from fsdp_verify.model.case import Case
from fsdp_verify.execute.simulated import WorldRun
from fsdp_verify.execute.world import simulate
from fsdp_verify.checks.graph_facts import (FSDP_KINDS, alias_class, by_name, has_effect, is_launch, is_wait, real_consumers,
                          storage_root, view_closure)

INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_EXACT_INT = {torch.float16: 2048, torch.bfloat16: 256, torch.float32: 2**24, torch.float64: 2**53}
# dtype -> (mantissa bits, exponent bias, binades used): about 15k distinct codes for 2-byte types,
# 48 to 60 for the float8 types (normal binades below 1 only, so no code is NaN or infinite, and none
# is zero, whose negative is the fnuz formats' NaN)
_FORMATS = {torch.float16: (10, 15, 14), torch.bfloat16: (7, 127, 120), torch.float32: (23, 127, 4),
            torch.float64: (52, 1023, 4), torch.float8_e4m3fn: (3, 7, 6), torch.float8_e5m2: (2, 15, 14),
            torch.float8_e4m3fnuz: (3, 8, 7), torch.float8_e5m2fnuz: (2, 16, 15)}
# Integer all-gather sources (quantised weights, 4-bit weights packed in uint8 or int32): every bit
# pattern is a code, spread the same way.
_INTEGERS = {torch.int8: -128, torch.uint8: 0, torch.int32: -(1 << 31)}  # dtype -> its smallest value
CODED_DTYPES = frozenset(_FORMATS) | frozenset(_INTEGERS)
# Collectives whose sources are summed across ranks: their codes are exact integers (``scatter_codes``).
# HSDP's all-reduce over the replicas (a captured graph's ``dp_all_reduce``) feeds the shard group's
# reduce-scatter: coded at the all-reduce, the reduce-scatter's input is an exact sum of codes, so a
# pass that reassociates the sum (dedup_reduce_scatters: ``rs(a) + rs(b)`` -> ``rs(a + b)``) moves no
# bit, while a lost or misplaced contribution still changes it. Left uncoded, natural values made
# such a reassociation a last-bit difference: a false alarm.
SUMMED_KINDS = ("fsdp_reduce_scatter", "dp_all_reduce")
_SPREAD = 0x5BD1E9  # odd: multiplying by it permutes the residues modulo any power of two
_SIGN = 0x9E3779B1


def gather_period(dtype: torch.dtype) -> int:
    """How many counters have distinct all-gather codes in ``dtype``."""
    if dtype in _INTEGERS:
        return 1 << (8 * dtype.itemsize)
    mantissa, _, binades = _FORMATS[dtype]
    return binades << mantissa


def gather_codes(counters: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The all-gather codes of ``counters`` (int64) as ``dtype``: injective on one period
    (``gather_period``); floats finite, nonzero and below 1 in magnitude, integers every value of
    the type."""
    if dtype in _INTEGERS:
        spread = (counters % gather_period(dtype) * _SPREAD) % gather_period(dtype)
        return (spread + _INTEGERS[dtype]).to(dtype)
    mantissa, bias, _ = _FORMATS[dtype]
    width, top = 8 * dtype.itemsize, min(mantissa, 23)
    counters = counters % gather_period(dtype)
    low = counters & ((1 << mantissa) - 1)
    spread = ((low & ((1 << top) - 1)) * _SPREAD) & ((1 << top) - 1)
    fraction = (spread << (mantissa - top)) | (low >> top)
    exponent = bias - 1 - (counters >> mantissa)
    sign = (((counters & ((1 << 30) - 1)) * _SIGN) >> 31) & 1
    bits = (exponent << mantissa) | fraction
    if width < 64:
        bits = bits - sign * (1 << (width - 1))  # the sign bit, in the narrower type's two's complement
    else:
        bits = torch.where(sign.bool(), bits | (-(1 << 63)), bits)
    return bits.to(INT_VIEW[dtype.itemsize]).view(dtype)


def gather_counter(bits: int, dtype: torch.dtype) -> Optional[int]:
    """The counter (within one period) whose code has these bits (an integer view), or None."""
    if dtype in _INTEGERS:
        period = gather_period(dtype)
        return ((bits - _INTEGERS[dtype]) % period * pow(_SPREAD, -1, period)) % period
    mantissa, bias, binades = _FORMATS[dtype]
    width, top = 8 * dtype.itemsize, min(mantissa, 23)
    bits &= (1 << width) - 1
    binade = bias - 1 - ((bits >> mantissa) & ((1 << (width - 1 - mantissa)) - 1))
    if not 0 <= binade < binades:
        return None
    fraction = bits & ((1 << mantissa) - 1)
    spread, rest = fraction >> (mantissa - top), fraction & ((1 << (mantissa - top)) - 1)
    low = (spread * pow(_SPREAD, -1, 1 << top)) % (1 << top)
    return (binade << mantissa) | (rest << top) | low


def scatter_codes(counters: torch.Tensor, dtype: torch.dtype, degree: int) -> torch.Tensor:
    """Reduce-scatter codes: ``(counter mod S + 1) / 2**e``, with ``S`` the largest span whose
    ``degree``-fold sums stay exact in ``dtype`` and ``2**e`` the power of two at or above it. ``S``
    is mostly not a power of two, so shards of power-of-two sizes (whose counter ranges start one
    such size apart) do not all get the same codes."""
    span = max(1, (_EXACT_INT.get(dtype, 256) - 1) // degree)
    return ((counters % span + 1).to(torch.float64) / (1 << (span - 1).bit_length())).to(dtype)


def capacity(kind: str, dtype: torch.dtype, degree: int) -> int:
    """How many elements of one source get distinct codes: the all-gather period, or the span whose
    ``degree``-fold sums stay exact (reduce-scatter)."""
    if kind in SUMMED_KINDS:
        return max(1, (_EXACT_INT.get(dtype, 256) - 1) // degree)
    return gather_period(dtype)


_TABLE_LIMIT = 1 << 22  # counters past this are coded directly (a table would cost more memory than it saves)
_TABLES: dict[tuple, torch.Tensor] = {}  # (kind, dtype, degree) -> the codes of counters 0, 1, ...


def _codes(kind: str, dtype: torch.dtype, degree: int, base: int, count: int) -> torch.Tensor:
    """The codes of counters ``base .. base + count - 1``, a read-only slice of a table shared by
    every case (counter ranges start at 1 in each, so the same codes are asked again and again;
    the table doubles as needed)."""
    end = base + count
    if end > _TABLE_LIMIT:
        return _direct(kind, dtype, degree, torch.arange(base, end, dtype=torch.int64))
    key = (kind in SUMMED_KINDS, dtype, degree if kind in SUMMED_KINDS else 0)
    table = _TABLES.get(key)
    if table is None or table.numel() < end:
        size = min(_TABLE_LIMIT, max(1 << 12, 1 << (end - 1).bit_length()))
        counters = torch.arange(size, dtype=torch.int64)
        table = _TABLES[key] = _direct(kind, dtype, degree, counters)
    return table[base:end]


def _direct(kind: str, dtype: torch.dtype, degree: int, counters: torch.Tensor) -> torch.Tensor:
    """The codes of ``counters`` for a source of ``kind``, computed without the table."""
    return scatter_codes(counters, dtype, degree) if kind in SUMMED_KINDS else gather_codes(counters, dtype)


class IdentityCodes:
    """Identity tensors for the sources of the original graph's tagged collectives."""

    def __init__(self, sources: dict[str, tuple[str, str, int]], cast: dict[str, torch.dtype] | None = None,
                 cast_nodes: frozenset[str] = frozenset(), digit: int = 0,
                 groups: dict[str, str] | None = None) -> None:
        self.sources = dict(sources)  # source node -> (param, kind, group size)
        self.groups = dict(groups or {})  # source node -> the group its collective runs on (a message names sums by it)
        # Which base-``capacity`` digit of each counter the codes carry: 0 in the shared run; 1 in
        # the layout checker's second run, where codes of the first repeat (``wrapped``). Two
        # counters whose codes agree in both runs are a multiple of capacity squared apart.
        self.digit = digit
        # a parameter placeholder coded for the cast it feeds: codes of that (narrower) dtype, held
        # exactly in the placeholder's own (see ``of``); ``cast_nodes`` are those casts
        self.cast = dict(cast or {})
        self.cast_nodes = frozenset(cast_nodes)
        # (source node, rank, elements) -> (first counter, count, param). Keyed by what a collective
        # moves, never by parameter: a parameter's backward reduce-scatter source holds degree times
        # the elements its forward all-gather source does, so a range shared by the two would
        # overlap the next parameter's, and two members of one fused launch could carry equal codes
        # (a member-major packing of equal-size members would then move nothing visible).
        self.ranges: dict[tuple[str, int, int], tuple[int, int, str]] = {}
        self.next_base = 1
        # sources whose codes repeat within themselves: more elements than the dtype's all-gather
        # period, or than a reduce-scatter's exact span (their layout verdict is a test, not a proof)
        self.wrapped: set[str] = set()
        self.dtypes: dict[str, torch.dtype] = {}  # source -> the dtype its codes were made in

    @classmethod
    def of(cls, original: fx.GraphModule, world: int = 1) -> "IdentityCodes":
        """Codes for the sources of every tagged collective of ``original`` (of a ``world`` of ranks).

        A gather whose source is a pure cast of a parameter placeholder (mixed precision: fp32 shard,
        bf16 gather) is coded at the placeholder instead, with codes of the cast's dtype held exactly
        in the wider one: the cast then yields those very codes. A rewrite may fold the cast into its
        bucket's copy-in (inductor does) and read the placeholder itself; codes at the cast's output
        would not reach it, and every consumer would see a false difference. A rewrite that casts to
        another dtype, or not at all, still delivers other bits or another dtype."""
        sources, cast, cast_nodes, groups = {}, {}, set(), {}
        # a built graph's placeholders carry no value meta; the header names their dtypes
        declared = {param.placeholder: dtype_from_name(param.dtype)
                    for param in original.meta.get(HEADER_KEY, {}).get("params", ())}
        for node in original.graph.nodes:
            kind = node.meta.get("comm_type")
            if kind not in FSDP_KINDS + SUMMED_KINDS or not node.args or not isinstance(node.args[0], fx.Node):
                continue
            # an all-reduce names no group size; its sum is summed again by the shard group's
            # reduce-scatter and, deduplicated, beside another gradient's: every rank twice at most
            degree = 2 * max(world, 1) if kind == "dp_all_reduce" else _degree(node)
            entry = (str(node.meta.get("param_name")), kind, degree)
            source = node.args[0]
            if is_wait(storage_root(source)):
                # a gather of another gather's result (2-D sharding: dp_shard, then dp_replicate)
                # moves codes already: coding it again would plant codes the rewrite never reads
                # once it buckets the inner gather (its result is then another node), a false alarm
                continue
            narrow = _pure_cast(source, declared) if entry[1] not in SUMMED_KINDS else None
            if narrow is not None:
                cast[source.args[0].name] = narrow
                cast_nodes.add(source.name)
                source = source.args[0]
            sources[source.name] = entry
            group = node.kwargs.get("group_name", node.args[-1])  # the oracle reads its own, as for _degree
            if isinstance(group, str):
                groups[source.name] = group
        return cls(sources, cast, frozenset(cast_nodes), groups=groups)

    def next_digit(self) -> "IdentityCodes":
        """Codes of the same sources carrying the next digit of each counter: the second run a
        wrapped source needs (its codes repeat, so a misplacement by the period would be unseen)."""
        return IdentityCodes(self.sources, self.cast, self.cast_nodes, digit=self.digit + 1, groups=self.groups)

    def beyond_two_digits(self) -> set[str]:
        """Wrapped sources with more elements than two digits tell apart (capacity squared)."""
        return {name for name, (_, kind, degree) in self.sources.items() if name in self.wrapped
                and any(count > capacity(kind, self.dtypes.get(name, torch.float32), degree) ** 2
                        for (source, _, count) in self.ranges if source == name)}

    def _base(self, source: str, param: str, rank: int, count: int) -> int:
        """Counter ranges are handed out on first use (the original's run) and reused for the rewrite
        (its sources are the original's nodes, by name)."""
        key = (source, rank, count)
        if key not in self.ranges:
            self.ranges[key] = (self.next_base, count, param)
            self.next_base += count
        return self.ranges[key][0]

    def coded(self, node: fx.Node, value: Any) -> bool:
        """Whether ``value``, ``node``'s result, is replaced by codes (floating sources of the
        dtypes the codes are defined for, without internal overlap)."""
        return node.name in self.sources and isinstance(value, torch.Tensor) and value.dtype in CODED_DTYPES and \
            (value.is_contiguous() or torch._debug_has_internal_overlap(value) == 0)

    def value(self, rank: int, node: fx.Node, value: Any) -> Any:
        """``value`` replaced by its codes when ``node`` is a coded source."""
        if not self.coded(node, value):
            return value
        param, kind, degree = self.sources[node.name]
        dtype = self.dtypes[node.name] = self._dtype(node.name, value.dtype)
        if value.numel() > capacity(kind, dtype, degree):
            self.wrapped.add(node.name)
        base = self._base(node.name, param, rank, value.numel())
        if self.digit:
            counters = torch.arange(base, base + value.numel(), dtype=torch.int64) // capacity(kind, dtype, degree) ** self.digit
            made = _direct(kind, dtype, degree, counters)
        else:
            made = _codes(kind, dtype, degree, base, value.numel())
        made = made.reshape(value.shape).to(value.dtype)
        if value.is_contiguous():
            return made.clone()  # a fresh tensor: the run may write to it
        # the source's own strides, so that a rewrite's views of it fail or succeed as they would
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype).copy_(made)

    def _dtype(self, name: str, held: torch.dtype) -> torch.dtype:
        """The dtype of ``name``'s codes: its cast's, when ``held`` holds those values exactly."""
        narrow = self.cast.get(name)
        return narrow if narrow is not None and (held == narrow or held in _WIDER.get(narrow, ())) else held

    def decode(self, tensor: torch.Tensor, position: int) -> str:
        """Which parameter, rank and element the all-gather code at ``position`` came from (else
        the value)."""
        flat = tensor.detach().contiguous().reshape(-1)
        if position >= flat.numel() or tensor.dtype not in CODED_DTYPES:
            return "?"
        return self.gathered(tensor, position) or f"value {float(flat[position])}"

    def gathered(self, tensor: torch.Tensor, position: int) -> Optional[str]:
        """``decode``'s name of an all-gather code, or None for a value that is none."""
        flat = tensor.detach().contiguous().reshape(-1)
        if position >= flat.numel() or tensor.dtype not in CODED_DTYPES:
            return None
        if self.digit:  # a code of a counter's higher digit names a block of elements, not one
            return f"digit-{self.digit} code {float(flat[position])}"
        bits = int(flat.view(INT_VIEW[tensor.element_size()])[position])
        counter = gather_counter(bits, tensor.dtype)
        period = gather_period(tensor.dtype)
        # the counter's own code, against the bits read: a code whose sign alone changed (a negated
        # value) decodes to the same counter and must not read as the element the original delivers
        own = None if counter is None else \
            int(gather_codes(torch.tensor([counter]), tensor.dtype).view(INT_VIEW[tensor.element_size()])[0])
        width = 8 * tensor.element_size()
        negated = own is not None and own != bits and (own ^ bits) & ((1 << width) - 1) == 1 << (width - 1)
        for (_, rank, _), (base, count, param) in self.ranges.items():
            if counter is not None and (own == bits or negated) and (counter - base) % period < count:
                return f"{param} (rank {rank}, element {(counter - base) % period}){' negated' if negated else ''}"
        return None

    def summed(self, run: "IdentityRun", tensor: torch.Tensor, position: int, param: str = "",
               group_ranks: Optional[dict[str, tuple[int, ...]]] = None) -> Optional[str]:
        """Which summed source's element (its codes' sum over the ranks of its collective's group, or
        over every rank that ran it, or that sum's average) the value at ``position`` equals, or
        None; ``param``'s own sources are tried first. ``group_ranks``: group -> ranks, as seen by
        the rank that received the value (a sub-group's sum is over its own ranks only).
        Sums of codes repeat (codes wrap, and two sources' ranges may sum alike), so an equal value
        names one element of those that give it, and says how many others do."""
        flat = tensor.detach().contiguous().reshape(-1)
        if position >= flat.numel() or not tensor.is_floating_point():
            return None
        value = flat[position]
        by_source: dict[str, dict[int, torch.Tensor]] = {}  # each summed source's codes, by rank
        for (rank, source), codes in run.sources.items():
            by_source.setdefault(source, {})[rank] = codes
        hits: list[tuple[str, int, str, int, str]] = []  # (param, element, how, ranks, group)
        for name, (owner, kind, _) in sorted(self.sources.items(), key=lambda item: item[1][0] != param):
            ran = by_source.get(name, {}) if kind in SUMMED_KINDS else {}
            group = self.groups.get(name, "")
            members = (group_ranks or {}).get(group)
            sets = [(tuple(r for r in sorted(members) if r in ran), f" of group {group}")] \
                if members and set(members) != set(ran) else []
            for ranks, where in sets + [(tuple(sorted(ran)), "")]:
                parts = [ran[r] for r in ranks]
                if not parts or any(t.shape != parts[0].shape for t in parts):
                    continue
                total = torch.stack([t.double().reshape(-1) for t in parts]).sum(0)
                for divisor, how in ((1, "sum"), (len(parts), "average"))[:2 if len(parts) > 1 else 1]:
                    found = ((total / divisor).to(tensor.dtype) == value).nonzero().reshape(-1).tolist()
                    hits += [(owner, element, how, len(parts), where) for element in found]
        if not hits:
            return None
        owner, element, how, ranks, where = hits[0]
        more = f"; {len(hits) - 1} other elements' codes give it too" if len(hits) > 1 else ""
        return f"{owner}'s element {element} ({how} over {ranks} ranks{where}{more})"


TO_COPY = "aten._to_copy.default"  # its dtype is keyword-only; convert_element_type's is positional too
CAST_TARGETS = CASTS  # the two cast forms a graph holds (graph.spec)
HALF_AND_UP = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# narrow dtype -> the dtypes that hold each of its values exactly (so codes of it survive a cast)
_WIDER = {torch.float16: (torch.float32, torch.float64), torch.bfloat16: (torch.float32, torch.float64),
          torch.float32: (torch.float64,), torch.float8_e4m3fn: HALF_AND_UP, torch.float8_e5m2: HALF_AND_UP,
          torch.float8_e4m3fnuz: HALF_AND_UP, torch.float8_e5m2fnuz: HALF_AND_UP,
          torch.int8: HALF_AND_UP, torch.uint8: HALF_AND_UP, torch.int32: (torch.float64,)}


def holds_exactly(narrow: torch.dtype, wide: torch.dtype) -> bool:
    """Whether every value of ``narrow`` is a value of ``wide`` (the dtypes codes are made for)."""
    return narrow == wide or wide in _WIDER.get(narrow, ())


def _pure_cast(node: fx.Node, declared: Optional[dict[str, torch.dtype]] = None) -> Optional[torch.dtype]:
    """The dtype ``node`` casts a floating parameter placeholder to, when it is only that cast (no
    device, layout or memory-format change) and one of the two dtypes holds the other's values
    exactly (the placeholder's: its value meta, else ``declared``, placeholder -> dtype; unknown,
    it is taken to hold them); else None."""
    if node.op != "call_function" or str(node.target) not in CAST_TARGETS or not node.args:
        return None
    source = node.args[0]
    if not isinstance(source, fx.Node) or source.op != "placeholder":
        return None
    positional = 1 if str(node.target) == TO_COPY else 2 - len(node.kwargs)  # the tensor, and convert's dtype
    if set(node.kwargs) - {"dtype"} or len(node.args) != positional:
        return None  # a device, layout or memory-format change too
    narrow = cast_dtype(node)
    wide = getattr(source.meta.get("val"), "dtype", None) or source.meta.get("dtype") or (declared or {}).get(source.name)
    # coded at the placeholder where one dtype holds the other: the cast's codes where the
    # placeholder holds them, else the placeholder's own, which a widening cast keeps (``_dtype``)
    return narrow if isinstance(narrow, torch.dtype) and narrow in CODED_DTYPES and \
        (wide is None or holds_exactly(narrow, wide) or holds_exactly(wide, narrow)) else None


def _degree(node: fx.Node) -> int:
    """The group size a functional collective names (its second-to-last argument), or 1."""
    size = node.args[-2] if len(node.args) >= 2 else 1
    return size if isinstance(size, int) and size > 0 else 1


def watched_consumers(original: fx.GraphModule) -> dict[str, str]:
    """Consumers of every tagged collective result (through views) -> the parameter they read."""
    return {consumer.name: str(node.meta.get("param_name")) for node in original.graph.nodes
            if node.meta.get("comm_type") in FSDP_KINDS
            for wait in node.users if is_wait(wait) for consumer in real_consumers(wait)}


def occurrences(node: fx.Node) -> list[fx.Node]:
    """The nodes ``node`` reads, one per argument that names one (a node read twice is here twice),
    in argument order: the slots an identity run records a consumer's inputs by."""
    found: list[fx.Node] = []
    fx.node.map_arg((node.args, node.kwargs), lambda read: found.append(read) or read)
    return found


def by_occurrence(node: fx.Node, values: tuple, known: Optional[dict] = None) -> tuple:
    """``values`` (one per ``all_input_nodes``, as a run hands them over) laid out by argument
    occurrence. By node, a consumer that reads one result in two arguments where the original read
    two results held one input fewer, and comparing the two runs slot by slot stopped at the
    shorter: a result read in another's place went unseen."""
    reads = node.all_input_nodes
    if len(values) != len(reads):
        return values
    if known is None:
        known = {}
    if node not in known:  # a run observes each node once per rank: its layout is worked out once
        known[node] = occurrences(node)
    occurring = known[node]
    if len(occurring) == len(reads):  # no node read twice: the same order (all_input_nodes keeps the first of each)
        return values
    index = {read: position for position, read in enumerate(reads)}
    return tuple(values[index[read]] for read in occurring)


def consumer_slots(original: fx.GraphModule) -> dict[str, dict[int, str]]:
    """Which parameter each watched consumer's inputs carry, by argument occurrence (``occurrences``,
    the slots a run records them in): a consumer of several collective results (the graph's output
    node) is about the one its differing input reads, not the one ``watched_consumers`` names."""
    slots: dict[str, dict[int, str]] = {}
    for node in original.graph.nodes:
        if node.meta.get("comm_type") not in FSDP_KINDS:
            continue
        for wait in [user for user in node.users if is_wait(user)]:
            views, readers = view_closure(wait)
            carried = {wait, *views}
            for reader in readers:
                for index, source in enumerate(occurrences(reader)):
                    if source in carried:
                        slots.setdefault(reader.name, {})[index] = str(node.meta.get("param_name"))
    return slots


@dataclass
class IdentityRun:
    """What one run of a world gave: its outputs, streams and sizes (``world``) and, by (rank,
    node name), the inputs of every watched consumer and launch (``None`` for a tensor already
    released), the codes every source produced, each coded source's own value before it was
    replaced (``natural``) and the coded sources that did not own their storage (``aliased``)."""

    world: WorldRun
    inputs: dict[tuple[int, str], list] = field(default_factory=dict)
    sources: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)
    natural: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)
    aliased: set[tuple[int, str]] = field(default_factory=set)


def _owns_storage(value: torch.Tensor, inputs: tuple) -> bool:
    """Whether ``value`` is a whole tensor whose storage none of its node's inputs holds (so codes
    in a new tensor of its strides lose nothing of it but its values)."""
    storage = value.untyped_storage()
    if value._base is not None or value.storage_offset() or storage.nbytes() != value.numel() * value.element_size():
        return False
    return not any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == storage.data_ptr()
                   for item in inputs for t in (item if isinstance(item, (list, tuple)) else (item,)))


def exposed(node: fx.Node, touched: dict[fx.Node, list[fx.Node]]) -> bool:
    """Whether some node may free or write the storage of source ``node`` other than through the
    source itself: an effect reading its storage root or a view of the root not derived from the
    source (what the source's codes, a tensor of their own, would not see), or a source that is
    itself a write (its result is its input). ``touched`` remembers, per storage root, the members
    of its alias class that an effect reads (the sources of one bucket share a root: one walk)."""
    if has_effect(node):
        return True
    root = storage_root(node)
    if root not in touched:
        touched[root] = [other for other in alias_class(root) if any(has_effect(user) for user in other.users)]
    if not touched[root]:
        return False
    own = {node, *view_closure(node)[0]}
    return any(other not in own for other in touched[root])


def identity_run(case: Case, modules: dict[int, fx.GraphModule], codes: IdentityCodes,
                 consumers: set[str], launch_inputs: bool = True) -> IdentityRun:
    """Run ``modules`` on the case's inputs with every source replaced by its codes, recording
    ``consumers``' inputs and (``launch_inputs``) every launch's, each source's codes and its
    value before coding."""
    distinct = {id(module): module for module in modules.values()}.values()  # ranks may share a module
    launches = {node.name for module in distinct for node in module.graph.nodes if is_launch(node)} \
        if launch_inputs else set()
    inputs: dict[tuple[int, str], list] = {}
    sources: dict[tuple[int, str], torch.Tensor] = {}
    natural: dict[tuple[int, str], torch.Tensor] = {}
    aliased: set[tuple[int, str]] = set()
    replaced: dict[tuple[int, str], torch.Tensor] = {}  # the value coded, until observe sees its inputs
    layouts: dict[fx.Node, list[fx.Node]] = {}  # each observed node's reads by argument (by_occurrence)

    def override(rank: int, node: fx.Node, value: Any) -> Any:
        if codes.coded(node, value):
            natural[(rank, node.name)] = value.detach().clone()  # later in-place ops may change it
            replaced[(rank, node.name)] = value
        return codes.value(rank, node, value)

    def observe(rank: int, node: fx.Node, args: tuple, result: Any) -> None:
        if node.name in codes.sources and isinstance(result, torch.Tensor):
            sources[(rank, node.name)] = result.detach().clone()
            value = replaced.pop((rank, node.name), None)
            if value is not None and not _owns_storage(value, args):
                aliased.add((rank, node.name))
        if node.name in consumers or node.name in launches:
            # a free's input is already released when the free has run
            inputs[(rank, node.name)] = [
                t.detach().clone() if isinstance(t, torch.Tensor) and (t.untyped_storage().size() or not t.numel())
                else None for t in by_occurrence(node, args, layouts)]

    world = simulate(case, modules, observe=observe, override=override,
                     watch=set(codes.sources) | consumers | launches, overridden=set(codes.sources))
    # sharing storage matters only where something else may free or write it
    names: dict[int, dict[str, fx.Node]] = {}  # by id(module), for the ranks that have aliased sources
    for rank, _ in aliased:
        if id(modules[rank]) not in names:
            names[id(modules[rank])] = by_name(modules[rank])
    touched: dict[fx.Node, list[fx.Node]] = {}
    aliased = {(rank, name) for rank, name in aliased if exposed(names[id(modules[rank])][name], touched)}
    return IdentityRun(world, inputs, sources, natural, aliased)
