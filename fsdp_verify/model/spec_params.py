"""The spec's inferred ([I]) choices as one object that the reference and the oracles both read.

FSDP_GRAPHS.md marks as [I] what the public listings do not settle: which op namespaces a
launch may come from, whether a ``getitem`` of a multi-output view is a view, whether opaque
module/method calls and foreign waits are barriers, and how an RS preparation chain names its
owner. A planner that reads a rule differently is judged under its own reading by pinning the
setting (``--spec-param name=value``); a campaign can also draw settings per example, recorded
in the case so replay uses them. Defaults are the spec's recommended definitions.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator

NAMESPACES = ("_c10d_functional", "c10d_functional")


@dataclass(frozen=True)
class SpecParams:
    """launch_namespaces: namespaces whose all-gather/reduce-scatter and wait_tensor count as the
        kind's op (spec 1.2 ``is_op``; the packet and its overloads of ``_c10d_functional`` by
        default, the legacy ``c10d_functional`` namespace is another op).
    collective_namespaces: namespaces whose launches are collectives inside a span (spec 1.6).
    getitem_views: ``getitem`` of a multi-output view op (split, unbind, chunk) is a view.
    opaque_calls_are_barriers: ``call_module``/``call_method`` nodes are barriers.
    rs_owner_is_bucket_id: an RS prep chain's owner must equal its launch's ``fsdp_bucket_id``
        (False: any truthy owner names the chain).
    foreign_waits_are_barriers: the wait of a non-member collective inside a span splits the
        bucket (``effect_or_storage_release``); spec 1.6 leaves it open.
    fused_spec_describes_launch: a fused launch that carries ``fsdp_bucket_spec`` or
        ``fsdp_degree`` states what it really moves (spec 1.8 asks only for the tags; the
        overlap stage and cost models read the spec, so a false one misleads them).
    new_nodes_carry_phase: every node a rewrite adds for a bucket (copy-in, fused wait,
        copy-out, RS split) carries the bucket's phase flag (spec 4.3 says it of RS chains; a
        later round's ``phase_boundary`` rule reads the flag of every node in a span).
    """

    launch_namespaces: tuple[str, ...] = ("_c10d_functional",)
    collective_namespaces: tuple[str, ...] = NAMESPACES
    getitem_views: bool = True
    opaque_calls_are_barriers: bool = True
    rs_owner_is_bucket_id: bool = True
    foreign_waits_are_barriers: bool = False
    fused_spec_describes_launch: bool = True
    new_nodes_carry_phase: bool = True

    def to_json(self) -> dict:
        """The settings that differ from the defaults (an empty dict for the spec's own reading)."""
        default = SpecParams()
        return {f.name: list(v) if isinstance(v, tuple) else v for f in dataclasses.fields(self)
                if (v := getattr(self, f.name)) != getattr(default, f.name)}


CHOICES: dict[str, tuple] = {
    "launch_namespaces": (("_c10d_functional",), NAMESPACES),
    "collective_namespaces": (NAMESPACES, ("_c10d_functional",)),
    "getitem_views": (True, False),
    "opaque_calls_are_barriers": (True, False),
    "rs_owner_is_bucket_id": (True, False),
    "foreign_waits_are_barriers": (False, True),
    "fused_spec_describes_launch": (True, False),
    "new_nodes_carry_phase": (True, False),
}
# Settings only the checkers read: a campaign never draws them (drawing False would only skip a
# check); a user whose rewriter reads the rule otherwise pins them.
CHECK_ONLY = frozenset({"fused_spec_describes_launch", "new_nodes_carry_phase"})

_ACTIVE = [SpecParams()]


def active() -> SpecParams:
    """The settings in force."""
    return _ACTIVE[-1]


@contextlib.contextmanager
def use(params: SpecParams) -> Iterator[SpecParams]:
    """Run a block under other settings (planning, rewriting and checking alike)."""
    _ACTIVE.append(params)
    try:
        yield params
    finally:
        _ACTIVE.pop()


def _value(name: str, value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = tuple(value)
    if value not in CHOICES[name]:
        raise ValueError(f"{name} must be one of {[list(c) if isinstance(c, tuple) else c for c in CHOICES[name]]}, "
                         f"got {value!r}")
    return value


def from_json(doc: Any) -> SpecParams:
    """Decode recorded settings; raises ValueError naming the setting and the reason."""
    if not isinstance(doc, dict):
        raise ValueError("must be an object {setting: value}")
    unknown = sorted(set(doc) - set(CHOICES))
    if unknown:
        raise ValueError(f"unknown settings {unknown}; known: {sorted(CHOICES)}")
    return SpecParams(**{name: _value(name, value) for name, value in doc.items()})


def parse_assignment(text: str) -> tuple[str, Any]:
    """``name=value`` from the command line (``true``/``false``; namespaces comma-separated)."""
    name, sep, raw = text.partition("=")
    if not sep or name not in CHOICES:
        raise ValueError(f"expected NAME=VALUE with NAME one of {sorted(CHOICES)}, got {text!r}")
    if name in ("launch_namespaces", "collective_namespaces"):
        return name, _value(name, tuple(part for part in raw.split(",") if part))
    if raw.lower() not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, got {raw!r}")
    return name, raw.lower() == "true"
