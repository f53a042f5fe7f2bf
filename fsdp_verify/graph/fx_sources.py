"""Forget the generated source of old GraphModules, so a long campaign's memory stays flat.

Every ``GraphModule.recompile`` stores its Python source in torch.fx's loader (for tracebacks)
and a lazy ``linecache`` entry, and nothing ever drops either: about 7 KB of source and a copy of
the module's globals per compiled graph, some thousands an hour in a campaign worker. The harness
builds, traces and rewrites graphs it never runs again once their case is judged, so only the most
recent sources are kept: a traceback of any recent module still shows its lines, and an older one
shows file and line without the text (the code itself is untouched: it is already compiled).
"""

from __future__ import annotations

import linecache

from torch.fx import graph_module

KEEP = 256  # sources kept: more than any one case compiles, so the current case loses none
_PREFIX = "<eval_with_key>."


def _serial(key: str) -> int | None:
    """The loader's serial number in ``key``; None for keys it did not number (a co_filename)."""
    if not key.startswith(_PREFIX):
        return None
    digits = key[len(_PREFIX):].split(" ", 1)[0]
    return int(digits) if digits.isdigit() else None


def forget_old_sources(keep: int | None = None) -> int:
    """Drop every numbered source older than the newest ``keep`` (default KEEP); returns how many
    were dropped."""
    loader = graph_module._loader
    oldest_kept = loader.next_id - (KEEP if keep is None else keep)
    old = [key for key in loader.eval_cache if (serial := _serial(key)) is not None and serial < oldest_kept]
    for key in old:
        del loader.eval_cache[key]
        linecache.cache.pop(key, None)
    return len(old)
