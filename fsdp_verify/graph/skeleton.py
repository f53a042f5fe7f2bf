"""The module tree a graph's parameter names imply, as an ``nn.Module`` with empty parameters.

``build_module_bucket_plans`` (spec 2.2) reads only a model's ``named_modules()`` and the types
of its modules, so a skeleton with the case's own names stands for the model the graph came
from. A module whose last name part is a number (``layers.10``) is a ``Block``, as the repeated
blocks of a transformer are; every block holds a child ``Block`` called ``inner``, so "outermost
blocks only" has something to leave out.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


class Block(nn.Module):
    """A repeated block of the skeleton: the block type module plans are built from."""


class Container(nn.Module):
    """Any other module of the skeleton."""


INNER = "inner"
# A module outside every block that holds no parameter (an unsharded head): explicit groups
# naming it combine with block groups without overlap, so their order is judged.
HEAD = "fsdp_verify_head"


def _child(parent: nn.Module, name: str) -> nn.Module | None:
    """``parent``'s module ``name``, made when missing; None when the name cannot hold a module."""
    existing = parent._modules.get(name)
    if existing is not None:
        return existing
    module = Block() if name.isdigit() else Container()
    try:
        parent.add_module(name, module)
    except (KeyError, TypeError):  # an attribute name (``training``), an empty part
        return None
    if name.isdigit():
        module.add_module(INNER, Block())
    return module


def skeleton(fqns: Iterable[str]) -> nn.Module:
    """A model whose ``named_modules()`` hold every module prefix of ``fqns`` and ``HEAD``, each
    parameter an empty tensor at its name; names a module tree cannot hold are left out."""
    root = Container()
    root.add_module(HEAD, Container())
    for fqn in fqns:
        parts = fqn.split(".") if isinstance(fqn, str) else []
        if len(parts) < 2 or any(not part for part in parts):
            continue
        module: nn.Module | None = root
        for part in parts[:-1]:
            module = _child(module, part)
            if module is None:
                break
        if module is None or parts[-1] in module._modules or hasattr(module, parts[-1]):
            continue
        module.register_parameter(parts[-1], nn.Parameter(torch.empty(0), requires_grad=False))
    return root
