"""Imported by the warm path's fork server (``warm.py``): inductor's probe of this machine's vector
instruction sets, run once there so that each warm process inherits the answer instead of building
and loading six probe programs (a second of its 2.4). The answer is a fact of the machine, the same
in any process; the probe compiles nothing of a model and imports no pass."""

from __future__ import annotations

from torch._inductor.cpu_vec_isa import pick_vec_isa, valid_vec_isa_list

try:
    valid_vec_isa_list()  # cached for the process (functools.cache): forked children reuse it
    pick_vec_isa()
except Exception:  # noqa: BLE001 - no compiler here: each child probes for itself and says why it fails
    pass
