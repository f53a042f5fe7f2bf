"""``fsdp-verify repro``: a standalone script that shows a corpus case's failure with torch alone.

The script rebuilds the case's graph with torch.fx (generated code, no JSON reader), makes the
harness's inputs bit for bit, rewrites each rank's copy as the harness did, runs original and
rewritten graphs on real gloo ranks and compares every output bitwise. The set-up code it needs
(input values, the fake world, fake values, inductor's routing) is copied from the modules the
harness itself runs (``execute/inputs.py``, ``targets/post_grad.py``), never written twice.

Three kinds of target, by what the script must import:
- ``torch-inductor``: torch only; the case's inductor configuration is a literal in the script.
- ``fx-pass:MODULE:CALLABLE``: torch and the pass's module.
- every other target (the reference, planted bugs, ``module:callable`` Targets): the target is
  written against fsdp-verify's interface, so only its rewrite step imports fsdp_verify.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Sequence

import torch
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from fsdp_verify.execute import inputs as input_values
from fsdp_verify.execute.simulated import rank_seed
from fsdp_verify.graph import collectives, ops
from fsdp_verify.graph.spec import (CASTS, GraphSpec, NodeSpec, ParamSpec, gradient_waits, padded_casts, padded_result, phase_of,
                                    traced_value, unpadded)
from fsdp_verify.graph.values import DTYPE_NAMES, MEMORY_FORMAT_NAMES, NodeRef, Opaque, node_refs
from fsdp_verify.model.case import Case
from fsdp_verify.targets import generators, post_grad
from fsdp_verify.targets.base import Target
from fsdp_verify.targets.debug_logs import debug_logs, loggers_held
from fsdp_verify.targets.fx_pass import FxPassTarget
from fsdp_verify.targets.inductor import TorchInductorTarget
from fsdp_verify.targets.registry import get_target

TEMPLATES = Path(__file__).parent / "templates"
# Python source, never HTML: nothing is escaped; StrictUndefined makes a missing value an error.
_ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=False, keep_trailing_newline=True,
                   trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
_HARNESS_FUNCTIONS = {"fsdp_verify.free_tensor_storage": "_free_tensor_storage",
                      "fsdp_verify.effect_barrier": "effect_barrier", "operator.getitem": "operator.getitem",
                      **{name: name for name in ops.PYTHON_OPERATORS}}  # the script imports operator
_DEVICE_INDEX = re.compile(r"^([A-Za-z_]+):(\d+)$")


class Kind(Enum):
    """What the script imports to run the target."""

    INDUCTOR = "inductor"
    FX_PASS = "fx_pass"
    HARNESS = "harness"


class ReproError(ValueError):
    """A case the command cannot write a script for; says why."""


class Caveat(Enum):
    """Why a failure the script shows would still be no defect of the target."""

    CONTRACT_MISMATCH = "contract mismatch"  # forms the target never receives in practice
    INVALID_INPUT = "invalid input"          # no real run accepts the graph


@dataclass(frozen=True)
class Note:
    """One caveat of a case, with the reason in words."""

    caveat: Caveat
    reason: str


@dataclass(frozen=True)
class Script:
    """A written script and what it needs."""

    text: str
    kind: Kind
    target: str
    notes: tuple[Note, ...] = field(default_factory=tuple)


def caveats(case: Case, target: Target) -> list[Note]:
    """What would make a failure on ``case`` no defect of ``target``: the target's own contract
    mismatches, and launches no real group could run (the rule of ``engine/triage.py``)."""
    return [Note(Caveat.CONTRACT_MISMATCH, why) for why in target.contract_mismatches(case)] + \
        [Note(Caveat.INVALID_INPUT, why) for why in collectives.invalid_launches(case.graph)]


def kind_of(target: Target) -> Kind:
    """The kind of script a target needs."""
    if isinstance(target, TorchInductorTarget):
        return Kind.INDUCTOR
    if isinstance(target, FxPassTarget):
        return Kind.FX_PASS
    return Kind.HARNESS


def literal(value: Any) -> str:
    """Python source for a decoded argument or meta value (node references name graph variables)."""
    if isinstance(value, NodeRef):
        return variable(value.name)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    if isinstance(value, torch.dtype):
        return f"torch.{DTYPE_NAMES[value]}"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, torch.memory_format):
        return f"torch.{MEMORY_FORMAT_NAMES[value]}"
    if isinstance(value, Opaque):
        return repr(value.text)
    if isinstance(value, tuple):
        return "(" + "".join(f"{literal(item)}, " for item in value).rstrip(" ") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key!r}: {literal(item)}" for key, item in value.items()) + "}"
    raise ReproError(f"cannot write a value of type {type(value).__name__} as Python")


def variable(name: str) -> str:
    """The script's variable for node ``name`` (prefixed: a node may be called ``torch`` or ``graph``)."""
    return f"n_{name}"


def target_expr(name: str) -> str:
    """Python source for a call target named as the graph description names it."""
    if name in _HARNESS_FUNCTIONS:
        return _HARNESS_FUNCTIONS[name]
    return "torch.ops." + name


def graph_lines(spec: GraphSpec) -> list[str]:
    """The statements that rebuild ``spec`` into ``graph`` (inside ``build_graph(rank)``); a rank
    that pads a shard (``PADDING``) gets the placeholder and pad ``builder.localize`` gives it."""
    padded = {p.placeholder: p for p in spec.params if p.padding}
    narrowed = gradient_waits(spec.nodes, {p.fqn: p for p in padded.values()})
    casts, params = padded_casts(spec.nodes, padded), dict(padded)
    lines = []
    for node in spec.nodes:
        if node.name in narrowed:
            lines += _unpad_lines(node, narrowed[node.name])
            continue
        if node.name in casts:
            lines += _cast_then_pad_lines(node, params[casts[node.name]])
            continue
        for name in [name for name in node.inputs() if name in padded]:
            param = padded.pop(name)
            lines += [f"if rank in PADDING[{name!r}]:  # this rank's shard is short: padded before it is read",
                      f"    {variable(name)} = graph.create_node(\"call_function\", "
                      f"torch.ops.aten.constant_pad_nd.default, ({variable(name)}, {_widths(param)}), {{}}, "
                      f"name={name!r})"]
        if node.op == "placeholder" and node.name in padded:
            own = f"{variable(unpadded(node.name))} = " if node.name in casts.values() else ""
            lines.append(f"{own}{variable(node.name)} = graph.placeholder(local_name({node.name!r}, rank))")
            continue
        lines += _node_lines(node)
    return lines


def _widths(param: ParamSpec) -> str:
    """The script's ``constant_pad_nd`` widths for ``param``'s short shard on ``rank``."""
    return f"[0] * {2 * len(param.shard_shape) - 1} + [PADDING[{param.placeholder!r}][rank]]"


def _cast_then_pad_lines(cast: NodeSpec, param: ParamSpec) -> list[str]:
    """A cast of a padded placeholder: a short rank casts its own rows and pads the cast
    (``builder.localize``); the other ranks cast their shard."""
    placeholder = param.placeholder
    own = replace(cast, args=(NodeRef(unpadded(placeholder)), *cast.args[1:]))
    var, phase, widths = variable(cast.name), phase_of(cast), _widths(param)
    lines = [f"if rank in PADDING[{placeholder!r}]:  # a short rank casts its own rows, then pads the cast"]
    lines += ["    " + line for line in _node_lines(own, repr(unpadded(cast.name)))]
    lines.append(f"    {var} = graph.create_node(\"call_function\", torch.ops.aten.constant_pad_nd.default, "
                 f"({var}, {widths}), {{}}, name={cast.name!r})")
    if phase:
        lines.append(f"    {var}.meta.update({literal(phase)})")
    lines.append("else:")
    return lines + ["    " + line for line in _node_lines(cast)]


def _unpad_lines(wait: NodeSpec, param: ParamSpec) -> list[str]:
    """A padded rank's gradient wait: the reduce-scatter gives the padded shard and the rank keeps
    its own rows (``builder.localize``: the wait renamed, a slice named as it was)."""
    placeholder, var = param.placeholder, variable(wait.name)
    lines = _node_lines(wait, f"{padded_result(wait.name)!r} if rank in PADDING[{placeholder!r}] else {wait.name!r}")
    phase = phase_of(wait)
    lines += [f"if rank in PADDING[{placeholder!r}]:  # this rank keeps its own rows of the scattered shard",
              f"    {var} = graph.create_node(\"call_function\", torch.ops.aten.slice.Tensor, ({var}, 0, 0, "
              f"{param.shard_shape[0]} - PADDING[{placeholder!r}][rank]), {{}}, name={wait.name!r})"]
    if phase:
        lines.append(f"    {var}.meta.update({literal(phase)})")
    return lines


def _node_lines(node: NodeSpec, name: str = "") -> list[str]:
    """The statements that add ``node``; ``name`` is an expression for its name (its own, quoted, by
    default)."""
    var, name = variable(node.name), name or repr(node.name)
    if node.op == "placeholder":
        lines = [f"{var} = graph.placeholder({node.name!r})"]
    elif node.op == "output":
        return [f"graph.output({literal(node.args[0])})"]
    else:
        kwargs = f", {literal(dict(node.kwargs))}" if node.kwargs else ""
        lines = [f"{var} = graph.create_node(\"call_function\", {target_expr(node.target)}, "
                 f"{literal(tuple(node.args))}{kwargs or ', {}'}, name={name})"]
    if node.meta:
        lines.append(f"{var}.meta.update({literal(dict(node.meta))})")
        bucket_spec = node.meta.get("fsdp_bucket_spec")
        device = bucket_spec.get("device") if isinstance(bucket_spec, dict) else None
        match = _DEVICE_INDEX.match(device) if isinstance(device, str) else None
        if match:  # each rank's graph names its own device (builder.localize)
            lines.append(f'{var}.meta["fsdp_bucket_spec"]["device"] = f"{match.group(1)}:{{rank}}"')
    traced = traced_value(node)
    if traced is not None:  # as the builder does: a meta tensor of the traced dtype and shape
        lines.append(f'{var}.meta["val"] = torch.empty({literal(traced[1])}, dtype=torch.{traced[0]}, device="meta")')
    return lines


def _attr_lines(spec: GraphSpec) -> list[str]:
    return [f"module.{key} = {literal(value)}" for key, value in spec.attrs.items() if key.isidentifier()]


def _inputs(spec: GraphSpec) -> str:
    facts = {item.placeholder: item for item in (*spec.params, *spec.inputs)}
    rows = []
    for node in spec.nodes:
        if node.op != "placeholder":
            continue
        item = facts[node.name]
        shape = list(item.shard_shape if isinstance(item, ParamSpec) else item.shape)
        high = 0 if isinstance(item, ParamSpec) else item.high
        rows.append(f"    {node.name!r}: ({shape}, {item.dtype!r}, {high}),")
    return "{\n" + "\n".join(rows) + "\n}" if rows else "{}"


# Ops that only move or cast values (each output element one input element, or a pad's zero): a
# shard that reaches a gather through them arrives as its own values, so full-mantissa values there
# show a rounding on the way, and change no sum.
_MOVES = frozenset({"view", "_unsafe_view", "reshape", "view_as", "transpose", "t", "permute", "contiguous",
                    "clone", "expand", "squeeze", "unsqueeze", "slice", "select", "narrow", "flatten", "alias",
                    "split", "split_with_sizes", "chunk", "cat", "constant_pad_nd", "getitem"})


def _moves(node: NodeSpec) -> bool:
    if node.target in CASTS:
        return True
    parts = str(node.target).split(".")
    return parts[0] in ("aten", "operator", "_operator") and len(parts) > 1 and parts[1] in _MOVES


def gathered_shards(spec: GraphSpec) -> tuple[str, ...]:
    """Parameter placeholders an all-gather moves, through any chain of ops that only move or cast
    values (views, slices, pads, copies, concatenations of a coalesced or packed gather): the script
    gives them full-mantissa values (as the harness's identity codes are), where exact dyadics
    (k/8) pass through any narrower dtype unchanged and a pass that gathers a float32 shard as
    bfloat16 would show nothing. Sums stay exact: reduction sources take exact values (``EXACT``)."""
    params = {param.placeholder for param in spec.params}
    nodes = {node.name: node for node in spec.nodes}
    found: list[str] = []
    seen: set[str] = set()
    stack = [ref.name for node in spec.nodes if collectives.kind(node.target) is collectives.Kind.ALL_GATHER
             and collectives.is_launch(node.target) and node.args for ref in node_refs(node.args[0])]
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        node = nodes[name]
        if name in params:
            found.append(name)
        elif _moves(node) and node.args:  # the moved operand (a list for cat), never a shape template
            stack.extend(ref.name for ref in node_refs(node.args[0]))
    return tuple(sorted(found, key=list(nodes).index))


def _module_source(module: Any) -> str:
    """A module's source without its docstring and ``__future__`` import (the script has its own)."""
    source = inspect.getsource(module)
    tree_doc = inspect.getdoc(module)
    body = source.split('"""', 2)[2] if tree_doc and source.lstrip().startswith('"""') else source
    return "\n".join(line for line in body.splitlines() if not line.startswith("from __future__")).strip()


def _input_source() -> str:
    return "\n\n\n".join(inspect.getsource(fn).strip() for fn in
                         (input_values._generator, input_values.input_tensor, input_values.exact_tensor))


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:200]


def _recorded(findings: Sequence[tuple[str, str]], limit: int = 6) -> list[str]:
    # quoted for people in the docstring; nothing reads it
    lines = [f"{checker}: {_first_line(said)}" for checker, said in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"... and {len(findings) - limit} more")
    return lines or ["no failure (the case passed when it was saved)"]


def write(case: Case, target_name: str, recorded: Sequence[tuple[str, str]] = (), case_id: str = "",
          source: str = "a corpus case", filename: str = "repro.py") -> Script:
    """The script for ``case`` against ``target_name``; ``recorded`` holds the (checker, message)
    pairs of the saved verdict, quoted in the script's docstring."""
    from fsdp_verify import __version__
    name = target_name
    spec = case.graph
    world = list(spec.world())
    target = get_target(name)
    if case.target_options and type(target).configure is not Target.configure:
        target = target.configure(dict(case.target_options))
    kind = kind_of(target)
    notes = caveats(case, target)
    held = loggers_held(target, case)
    context = {
        "title": f"Repro: {name} on {case.label or 'a case'}" + (f" (case {case_id})" if case_id else ""),
        "version": __version__, "source": source, "target_name": name, "kind": kind.value,
        "imports_harness": kind is Kind.HARNESS, "pass_spec": target.spec if kind is Kind.FX_PASS else "",
        "recorded": _recorded(list(recorded)),
        "notes": [f"{note.caveat.value}: {note.reason}; a failure here is no defect of the target" for note in notes], "filename": filename,
        "world": world, "groups": {group: [list(part) for part in parts] for group, parts in spec.groups.items()},
        "seed": case.seed, "inputs": _inputs(spec), "rank_seeds": repr({rank: rank_seed(rank) for rank in world}),
        "loggers": repr(list(held)) if held else "",
        "debug_logs_source": inspect.getsource(debug_logs).strip(),
        "padding": repr({p.placeholder: dict(p.padding) for p in spec.params if p.padding})
        if spec.uneven else "", "exact": list(collectives.reduce_sources(spec)),
        "full": list(gathered_shards(spec)),
        "config": repr(dict(sorted(target.config.items())) if kind is Kind.INDUCTOR else {}),
        "case_json": repr(json.dumps(case.to_json(), sort_keys=True)),
        "registering_imports": ops.registering_modules(n.target for n in spec.nodes),
        "effects": any(n.target in ("fsdp_verify.free_tensor_storage", "fsdp_verify.effect_barrier")
                       for n in spec.nodes),
        "graph_lines": graph_lines(spec), "attr_lines": _attr_lines(spec),
        "input_source": _input_source(), "post_grad_source": _module_source(post_grad),
        "generators_source": _module_source(generators),
        "restored": repr([name.value for name in target.restored_generators]),
        "effects_source": "\n\n\n".join(inspect.getsource(fn).strip() for fn in
                                         (ops._free_tensor_storage, ops.effect_barrier)),
    }
    text = _ENV.get_template("repro.py.j2").render(**context)
    compile(text, filename, "exec")  # a script that does not parse is this command's bug, found here
    return Script(text, kind, name, tuple(notes))


__all__ = ["Caveat", "Kind", "Note", "ReproError", "Script", "caveats", "kind_of", "literal", "write"]
