"""Matrix products whose bits do not depend on where their operands lie in memory.

Why: the end-to-end verdict compares a bucketed compile with the unbucketed one bit for bit, and a
bucket places each gathered parameter at an offset inside one buffer, where the unbucketed gather
allocates it alone. MKL's default kernels round an fp32 matrix-vector product otherwise when the
matrix is not 16-byte aligned (one row of input, a weight at an odd float offset: last-bit
differences), so a correct bucketing looked like a changed output. MKL's strict conditional
numerical reproducibility mode (``MKL_CBWR=AUTO,STRICT``) gives the same bits at any alignment, and
it changes nothing a bucketing fault can do to values: a wrong, stale or rounded member still
differs. It must be set before MKL's first use in a process: rank processes get it in their
environment, and ``pin`` sets it in this one when still possible. ``probe`` is the evidence either
way, since a build without MKL (or a process that used it first) may still round by alignment.
"""

from __future__ import annotations

import ctypes
import enum
import os
from typing import Iterable, Optional

import torch

ENV = {"MKL_CBWR": "AUTO,STRICT"}  # what a process that judges compiled runs starts with
_AUTO, _STRICT, _ALL = 2, 0x10000, -1  # mkl_service.h: MKL_CBWR_AUTO, MKL_CBWR_STRICT, MKL_CBWR_ALL


class Blas(enum.Enum):
    """Whether this process's matrix products can differ by the alignment of their operands."""

    PINNED = "pinned"  # MKL in strict mode, and the probe saw no difference
    INSENSITIVE = "insensitive"  # not pinned, but the probe saw no difference
    SENSITIVE = "sensitive"  # the probe saw an fp32 product change with its weight's alignment


def _mkl() -> Optional[ctypes.CDLL]:
    """torch's own MKL service functions (linked into libtorch_cpu), or None on a build without."""
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        lib.mkl_serv_cbwr_get.restype = lib.mkl_serv_cbwr_set.restype = ctypes.c_int
        return lib
    except (OSError, AttributeError):
        return None


def probe(trials: int = 12) -> bool:
    """Whether an fp32 ``linear`` of one row gives other bits when its weight sits at an odd offset
    (the case bucketing creates), over a few seeded draws."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(trials):
        x, w = torch.randn(1, 8, generator=gen), torch.randn(8, 8, generator=gen)
        aligned = torch.nn.functional.linear(x, w)
        for offset in (1, 2, 3):
            placed = torch.empty(offset + w.numel())[offset:].view(8, 8)
            placed.copy_(w)
            if not torch.equal(torch.nn.functional.linear(x, placed), aligned):
                return True
    return False


def pin() -> Blas:
    """Put this process's MKL in strict mode if it has not computed yet (or already is), then probe."""
    lib = _mkl()
    pinned = lib is not None and (bool(lib.mkl_serv_cbwr_get(_ALL) & _STRICT)
                                  or lib.mkl_serv_cbwr_set(_AUTO | _STRICT) == 0)
    if probe():
        return Blas.SENSITIVE
    return Blas.PINNED if pinned else Blas.INSENSITIVE


def worst(states: Iterable[Optional[str]]) -> str:
    """The least reproducible of some processes' states (values of ``Blas``); one that said none, or
    no process at all, counts as sensitive: a verdict never claims more than was shown."""
    order = [Blas.SENSITIVE.value, Blas.INSENSITIVE.value, Blas.PINNED.value]
    return min((state if state in order else order[0] for state in states), key=order.index, default=order[0])


def said(states: set[Blas]) -> str:
    """The summary's line on the verdicts' BLAS, from every process's state."""
    if Blas.SENSITIVE in states:
        return ("BLAS: matrix products here round by operand alignment in some judging process (not MKL, or "
                "MKL used before it could be pinned): a last-bit difference of an fp32 output may be where "
                "a bucket put a weight, not what bucketing did")
    if states == {Blas.PINNED}:
        return "BLAS: MKL in strict reproducibility mode in every judging process (bits independent of alignment)"
    return "BLAS: no judging process showed alignment-dependent rounding"


__all__ = ["Blas", "ENV", "pin", "probe", "said", "worst"]
