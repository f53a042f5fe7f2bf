"""Watching a target's own ``plan`` calls during its run: what the harness needs to know about the
graph each plan was made for, taken while that graph exists (the target's driver rewrites it in
place right after)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Protocol

from torch import fx

from fsdp_verify.targets.base import Target


class PlanWatch(Protocol):
    """``before`` sees the graph a plan is about to be made for and returns what to keep of it
    (None: nothing); ``after`` gets that with the plan the target returned; ``close`` ends it."""

    def before(self, rank: int, module: fx.GraphModule) -> Optional[Any]: ...

    def after(self, rank: int, plan: Any, seen: Any) -> None: ...

    def close(self) -> None: ...


@contextlib.contextmanager
def watching(target: Target, watch: Optional[PlanWatch]) -> Iterator[None]:
    """Within the block, every ``target.plan`` call (the target's drivers call ``self.plan``) goes
    through ``watch``; the target's own method is restored afterwards. A planner that raises
    raises as before; ``watch`` itself must not raise."""
    if watch is None or not target.has_planner:
        yield
        return
    own = vars(target).get("plan")
    plan = target.plan

    def watched(*args: Any, **kwargs: Any) -> Any:
        # ``plan(case, module, rank)``, however a driver passes them; anything else is not watched
        module = args[1] if len(args) > 1 else kwargs.get("module")
        rank = args[2] if len(args) > 2 else kwargs.get("rank")
        if not isinstance(module, fx.GraphModule) or not isinstance(rank, int):
            return plan(*args, **kwargs)
        seen = watch.before(rank, module)
        result = plan(*args, **kwargs)
        if seen is not None:
            watch.after(rank, result, seen)
        return result

    target.plan = watched  # type: ignore[method-assign]
    try:
        yield
    finally:
        watch.close()  # a reference the target kept to ``watched`` is not watched after its run
        if own is None:
            del target.plan
        else:
            target.plan = own  # type: ignore[method-assign]
