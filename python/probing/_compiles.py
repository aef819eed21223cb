"""Hands each torch.compile compile to the C agent (python.compiles, docs/tables.md).

torch._dynamo.utils.record_compilation_metrics builds one CompilationMetrics record per
compile (first compiles, recompiles with the guard that failed, the recompile limit reached,
AOT autograd's lazily compiled backward) and appends it to the module's deque
_compilation_metrics. That append is the one place every compile passes through once, so the
deque is replaced by a subclass whose append also hands the record to probing._agent._compiled.
Nothing runs per call of a compiled function or per step; an error here is swallowed (torch
would log it as a failed metrics callback, and the compile goes on).
"""
import collections
import sys

from . import _agent

_seen_breaks = {}  # counters["graph_break"] at the last forward compile: reason -> count
_frames = {}  # Dynamo frame id ("0" of "0/3") -> (function, file, line) of its first compile

KIND_COMPILE, KIND_RECOMPILE, KIND_LIMIT, KIND_FAILED, KIND_BACKWARD = range(5)


def _breaks_since_last():
    """(count, reasons) of the graph breaks Dynamo counted since the previous forward compile:
    torch counts each break in counters["graph_break"][reason] while it traces the frame, and
    frames compile one at a time, so the growth since the last record is this compile's.
    (CompilationMetrics.num_graph_breaks is Inductor's copy of the process's running total, and
    restart_reasons also holds restarts that are no graph break.)"""
    global _seen_breaks
    counts = dict(sys.modules["torch._dynamo.utils"].counters.get("graph_break", {}))
    seen = _seen_breaks
    if any(counts.get(k, 0) < n for k, n in seen.items()):  # cleared since (counters.clear())
        seen = {}
    grown = [(n - seen.get(k, 0), k) for k, n in counts.items() if n > seen.get(k, 0)]
    _seen_breaks = counts
    return sum(n for n, _ in grown), sorted(k for _, k in grown)


def _us(value):
    return -1 if value is None else int(value)


def _hand_over(m):
    if getattr(m, "is_runtime", False):
        return
    compile_id = str(m.compile_id) if m.compile_id is not None else None
    frame_id = compile_id.split("/")[0] if compile_id else None
    function, file, line = m.co_name, m.co_filename, m.co_firstlineno or 0
    if function is None and frame_id in _frames:
        function, file, line = _frames[frame_id]
    elif function is not None and frame_id is not None and frame_id not in _frames:
        _frames[frame_id] = (function, file, line)
    reason = m.recompile_reason
    fail = m.fail_reason or ""
    if m.is_forward is False:
        kind = KIND_BACKWARD
    elif m.fail_type and "recompile limit" in fail:
        kind = KIND_LIMIT
        reason = f"{fail.splitlines()[0]} (last guard failure: {reason})" if reason else fail
    elif m.fail_type:
        kind, reason = KIND_FAILED, f"{m.fail_type}: {fail}"
    elif reason:
        kind = KIND_RECOMPILE
    else:
        kind = KIND_COMPILE
    graph_breaks, breaks = _breaks_since_last() if kind != KIND_BACKWARD else (0, [])
    duration = _us(m.duration_us)
    if duration < 0 and m.entire_frame_compile_time_s is not None:
        duration = int(m.entire_frame_compile_time_s * 1e6)
    dynamo = -1
    if duration >= 0 and m.backend_compile_time_s is not None:
        dynamo = max(0, duration - int(m.backend_compile_time_s * 1e6))
    _agent._compiled(compile_id, function, file, int(line), kind, reason, int(graph_breaks),
                     breaks[0] if breaks else None, duration, dynamo,
                     _us(m.aot_autograd_cumulative_compile_time_us),
                     _us(m.inductor_cumulative_compile_time_us))


class _Metrics(collections.deque):
    """torch's deque of compilation metrics, which also hands each new record to the agent."""

    def append(self, m):
        super().append(m)
        try:
            _hand_over(m)
        except Exception:  # never fail torch's compile bookkeeping
            pass


def install():
    """Replaces torch._dynamo.utils._compilation_metrics (once), keeping what it holds."""
    utils = sys.modules.get("torch._dynamo.utils")
    old = getattr(utils, "_compilation_metrics", None)
    if old is None or isinstance(old, _Metrics) or not isinstance(old, collections.deque):
        return
    utils._compilation_metrics = _Metrics(old, maxlen=old.maxlen)
