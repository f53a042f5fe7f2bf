"""A forked child that serves many requests, one at a time, and is replaced when it may be broken.

Forking a process that holds torch is dear (page tables, then copy-on-write faults as either side
writes), so a child per case cost the campaign about 60% more CPU than running in-process. A
persistent child pays that once and keeps the guarantees of a child per case, the way libFuzzer's
fork mode and AFL's persistent mode do:

- a request that kills the child, or outlasts the parent's deadline, costs only that child: the
  parent kills it (if need be) and the next request forks a fresh one;
- a request after which the child may be in a bad state (the server says so, or the process's
  fingerprint changed: threads left running, working directory, environment, signal handlers,
  torch's global switches) retires the child, so no later request runs where a target broke
  something;
- each reply carries the number of the request it answers, so a late message from an earlier
  request (a target's leftover thread) is never taken for the current answer;
- with an ``output`` file, what the child prints (the target's logs and warnings, a native crash's
  last words) goes there, emptied at each request, so the caller keeps a request's output with its
  finding instead of flooding the campaign's log (as libFuzzer's ``-close_fd_mask`` does).

Only this module forks, pipes and kills for a case; what runs in the child is the caller's.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

#: "1": persistent children print where the harness prints (their target's logs and warnings on
#: every case); otherwise a caller keeps each request's output (``Child(output=...)``).
SHOW_OUTPUT_ENV = "FSDP_VERIFY_SHOW_TARGET_OUTPUT"


def shows_output() -> bool:
    """Whether children are to print to the harness's own streams (else their output is kept)."""
    return os.environ.get(SHOW_OUTPUT_ENV, "") not in ("", "0")


#: A child is replaced after this many requests or this much growth of its address space, so a slow
#: leak (the target's or the harness's) never reaches a later case's memory limit.
MAX_REQUESTS = 1000
MAX_GROWTH = 2 << 30


@dataclass(frozen=True)
class Request:
    """What the parent sends: a number, the payload, and the limits the child applies for it."""

    number: int
    payload: Any
    memory: int = 0  # bytes the request may map beyond what the child holds (0: no limit)
    output: int = 0  # largest file the request may write (0: no limit)


@dataclass(frozen=True)
class Reply:
    """One message of the child about request ``number``; ``last`` ends that request's replies."""

    number: int
    message: Any
    last: bool = False
    retiring: bool = False  # with ``last``: the child exits now and takes no further request


@dataclass(frozen=True)
class Served:
    """What a server returns for one request: its final message, and whether the child is still
    fit for another request (``False``: the child exits after sending it)."""

    message: Any
    fit: bool = True
    # The message with every value that may not pickle made plain, sent when ``message`` does not
    # pickle (a target's plan holding a graph node where the spec wants a string): what the server
    # found still reaches the parent. None: a message that does not pickle is the server's failure.
    plain: Optional[Callable[[], Any]] = None


Server = Callable[[Any, Callable[[Any], None]], Served]


class ChildDied(Exception):
    """The child's end of the pipe closed: it died (``exitcode`` says how) or retired."""

    def __init__(self, exitcode: Optional[int]) -> None:
        super().__init__(exitcode)
        self.exitcode = exitcode


def die_with_parent(signum: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Linux: this process gets ``signum`` when its parent dies, so no child outlives the harness.
    ``parent`` (the pid that started this process) closes the race of a parent that died before
    the request was made: the signal is then sent at once."""
    try:
        ctypes.CDLL(None).prctl(1, signum)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signum)


def unshared_bar_lock() -> None:
    """Give tqdm a thread lock. Its default lock is a named semaphore wherever the default start
    method is not fork (a spawned worker or rank: torch.fx's Interpreter and inductor make bars),
    released only at a clean exit: a process killed after a failed case, or at its stop's grace,
    left one for the resource tracker to warn of when the run ended. No harness process shares a
    bar with another."""
    from tqdm import tqdm
    tqdm.set_lock(threading.RLock())


def mapped_bytes() -> int:
    """This process's address space, as the kernel's RLIMIT_AS counts it."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def apply_limits(memory: int, output: int) -> None:
    """Cap this process for the next request: its address space may grow by ``memory`` over what
    it maps now (torch maps much it never touches), and no file it writes may pass ``output``.
    Soft limits only, so a later request may raise them again; a lower hard limit stands."""
    import resource
    for kind, value in ((resource.RLIMIT_AS, mapped_bytes() + memory if memory > 0 else -1),
                        (resource.RLIMIT_FSIZE, output if output > 0 else -1)):
        hard = resource.getrlimit(kind)[1]
        soft = value if value > 0 else hard
        if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
            soft = hard
        try:
            resource.setrlimit(kind, (soft, hard))
        except (ValueError, OSError):
            pass


def fingerprint() -> tuple:
    """The process state a request must leave as it found it for the child to serve another one.
    Cheap (a few milliseconds); what is not here (a module's private globals) is why a target that
    raised retires its child too (the server says so)."""
    torch = sys.modules.get("torch")
    switches: tuple = ()
    if torch is not None:
        switches = (torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype(),
                    torch.are_deterministic_algorithms_enabled())
    configs = tuple((name, repr(sorted(sys.modules[name].get_config_copy().items())))
                    for name in ("torch._inductor.config", "torch._dynamo.config", "torch.fx.experimental._config")
                    if name in sys.modules and hasattr(sys.modules[name], "get_config_copy"))
    handlers = tuple(signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD))
    return (threading.active_count(), os.getcwd(), dict(os.environ), handlers, switches, configs,
            sys.getrecursionlimit(), tuple(sys.path))


def output_file() -> int:
    """A descriptor of a new file for a child's output, unlinked at once: it lives as long as a
    process holds it, so no exit path (a killed worker, a test runner's ``os._exit``) leaves it on
    disk. Opened for appending: a child's writes go to its end wherever a reader stands."""
    handle, path = tempfile.mkstemp(prefix="fsdp-verify-target-output-", suffix=".log")
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND)
    finally:
        os.close(handle)
        os.unlink(path)


def _redirect(descriptor: int) -> int:
    """Point this process's stdout and stderr (Python's and C's) at ``descriptor`` (``output_file``)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.ftruncate(descriptor, 0)  # none of a dead child's
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    # Python's streams anew on those descriptors: the parent's may write elsewhere (a capturing
    # test runner's, a progress bar's)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    return descriptor


def _flush_c() -> None:
    try:
        ctypes.CDLL(None).fflush(None)  # C's stdio buffers a file: a native printf must land in its case
    except (OSError, AttributeError):
        pass


def _empty(descriptor: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    _flush_c()
    try:
        os.ftruncate(descriptor, 0)  # appends start again at 0
    except OSError:
        pass


def _serve(server: Server, setup: Callable[[], None], conn, parent: int, output: Optional[int] = None) -> None:
    die_with_parent(parent=parent)
    descriptor = _redirect(output) if output is not None else None
    setup()
    start, served = mapped_bytes(), 0
    before = fingerprint()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if descriptor is not None:
            _empty(descriptor)
        apply_limits(request.memory, request.output)
        served += 1
        result = server(request.payload, lambda message: conn.send(Reply(request.number, message)))
        if descriptor is not None:  # what the request printed is in the file before the parent reads it
            sys.stdout.flush()
            sys.stderr.flush()
            _flush_c()
        after = fingerprint()
        fit = result.fit and after == before and served < MAX_REQUESTS and mapped_bytes() - start < MAX_GROWTH
        try:
            conn.send(Reply(request.number, result.message, last=True, retiring=not fit))
        except Exception:  # noqa: BLE001 - pickling failed before a byte was written
            if result.plain is None:
                raise
            fit = False  # whatever held the unpicklable value may hold more of it
            conn.send(Reply(request.number, result.plain(), last=True, retiring=True))
        if not fit:
            return
        before = after


class Child:
    """The parent's handle on one persistent child: ``submit`` a request, then ``receive`` its
    replies under the parent's own deadlines; ``kill`` whenever the answer is no longer wanted."""

    def __init__(self, server: Server, setup: Callable[[], None] = lambda: None,
                 output: Optional[int] = None) -> None:
        self._server, self._setup, self.output = server, setup, output
        self._process = None
        self._conn = None
        self._number = 0
        self.started = 0  # processes forked so far (the parent's metric of what isolation cost)

    def _start(self) -> None:
        context = multiprocessing.get_context("fork")
        mine, theirs = context.Pipe(duplex=True)
        self._process = context.Process(target=_serve, args=(self._server, self._setup, theirs, os.getpid(),
                                                             self.output), daemon=True)
        self._process.start()
        theirs.close()
        self._conn = mine
        self.started += 1

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def submit(self, payload: Any, memory: int = 0, output: int = 0) -> None:
        """Send one request, forking a child first if none is fit to take it."""
        if not self.alive:
            self.kill()
            self._start()
        self._number += 1
        try:
            self._conn.send(Request(self._number, payload, memory, output))
        except (BrokenPipeError, ConnectionError, OSError):
            self.kill()  # retired or died between requests: one fresh fork and a second try
            self._start()
            self._conn.send(Request(self._number, payload, memory, output))

    def receive(self, timeout: float) -> Optional[Reply]:
        """The next reply to the current request, or ``None`` when ``timeout`` seconds pass first.
        Raises :class:`ChildDied` when the child is gone before its last reply."""
        try:
            while self._conn.poll(max(timeout, 0.0)):
                reply = self._conn.recv()
                if isinstance(reply, Reply) and reply.number == self._number:
                    if reply.last and reply.retiring:
                        self._join()  # it exits now: the next request forks at once
                    return reply
                # an earlier request's straggler: not this request's answer
        except (EOFError, ConnectionError, OSError):
            exitcode = self._join()
            raise ChildDied(exitcode) from None
        return None

    def _join(self) -> Optional[int]:
        process = self._process
        if process is None:
            return None
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)
        code = process.exitcode
        self._drop()
        return code

    def kill(self) -> None:
        """Stop the child now (a deadline passed, the parent is stopping, or the answer is moot)."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()
        if self._process is not None:
            self._process.join(10)
        self._drop()

    def output_tail(self, limit: int = 4096) -> str:
        """The last ``limit`` bytes the child printed for the current request ('' without an
        output file). Read after the request ended, however it ended (the file outlives a death)."""
        if self.output is None:
            return ""
        try:
            size = os.fstat(self.output).st_size
            return os.pread(self.output, limit, max(0, size - limit)).decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Stop the child and close its output file (unlinked since it was made: nothing stays)."""
        self.kill()
        if self.output is not None:
            try:
                os.close(self.output)
            except OSError:
                pass
            self.output = None

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None
