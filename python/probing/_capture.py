"""torch.profiler for `probing <target> capture`, driven by the C agent (src/agent/collect/capture.c).

The agent calls, on the training thread, with the GIL held, at step boundaries:

    start(memory, shapes, stack) -> (device, enter, exit)   the first boundary after the
                                            request: torch.profiler starts; enter/exit are the
                                            record-function ops the agent opens a range with
                                            around every module call while capturing
    mark(step)                              each boundary inside the capture: a zero-length
                                            range "probing::step N" in the profiler's own clock
    stop(capture_id, first_step, trace_path)  after the last captured step: the profiler stops;
                                            the results are turned into rows on a thread of
                                            its own, which hands them to
                                            probing._agent._capture_finished()
    abort()                                 a cancelled capture: the profiler stops, nothing kept

Whatever these raise is caught by the agent and reported to the client; nothing reaches the
training loop. Rows are aggregated per (step, op name, module, stage, device type, input shapes,
stack), so a capture is thousands of rows, not one per op call. See docs/tables.md
(python.torch_ops) for what each column means and how ops are given a module.
"""
import bisect
import os
import sys
import threading
import time

MODULE_RANGE = "module: "         # the ranges the agent opens around module calls
STEP_MARK = "probing::step "      # the zero-length ranges mark() leaves at step boundaries
BACKWARD_RANGE = "autograd::engine::evaluate_function: "
OPTIMIZER_RANGES = ("Optimizer.step#", "Optimizer.zero_grad#")
# Utility events torch's own post-processing leaves out (torch.autograd.profiler_util).
HIDDEN = frozenset(("[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
                    "profiler::_record_function_enter_new", "profiler::_record_function_exit",
                    "aten::is_leaf", "aten::output_nr", "aten::_version"))
DEVICE_ACTIVITIES = frozenset(("kernel", "gpu_memcpy", "gpu_memset"))
STACK_FRAMES = 5

# Stage codes, as the C table's enum (src/agent/collect/capture.c).
FORWARD, BACKWARD, OPTIMIZER, OTHER = 0, 1, 2, 3

_profiler = None


def start(memory, shapes, stack):
    """Starts torch.profiler. Returns ("cuda" or None, enter_fn, exit_fn)."""
    global _profiler
    import torch
    from torch.profiler import ProfilerActivity, profile

    if _profiler is not None:
        abort()
    if torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled():
        raise RuntimeError("the program is running torch.profiler (or torch.autograd.profiler) "
                           "itself; a capture cannot run at the same time")
    activities = [ProfilerActivity.CPU]
    device = None
    # CUDA only when the program uses it already: never initialise CUDA in a CPU job.
    if (torch.cuda.is_initialized()
            and ProfilerActivity.CUDA in torch.profiler.supported_activities()):
        activities.append(ProfilerActivity.CUDA)
        device = "cuda"
    enter = torch.ops.profiler._record_function_enter_new
    exit_ = torch.ops.profiler._record_function_exit._RecordFunction
    prof = profile(activities=activities, record_shapes=bool(shapes),
                   profile_memory=bool(memory), with_stack=bool(stack))
    # with_stack: torch's Python tracer reads Module.__call__.__code__ as it starts, to know
    # module calls. The agent's C wrapper of __call__ has none; it lends the original's while
    # the tracer starts (the original's frames are the ones that run).
    call = torch.nn.Module.__dict__.get("__call__")
    lent = (stack and call is not None and not hasattr(call, "__code__")
            and hasattr(getattr(call, "__wrapped__", None), "__code__"))
    if lent:
        call.__code__ = call.__wrapped__.__code__
    # Kineto, as it initialises on the process's first profiler start, prints two "USDT: ...
    # profiler_start / profiler_stop" lines per profile into the job's stderr (at its highest
    # severity, above its errors). KINETO_LOG_LEVEL=6 silences it; read once, there and then,
    # so it is set only around that start and only when the program did not set it itself.
    quiet = "KINETO_LOG_LEVEL" not in os.environ
    if quiet:
        os.environ["KINETO_LOG_LEVEL"] = "6"
    try:
        prof.__enter__()
    except BaseException:
        _quietly_stop(prof)  # a start that failed halfway must not leave the profiler on
        raise
    finally:
        if quiet:
            os.environ.pop("KINETO_LOG_LEVEL", None)
        if lent:
            del call.__code__
    _profiler = (prof, device, bool(memory), bool(shapes), bool(stack), enter, exit_)
    return device, enter, exit_


def _quietly_stop(prof):
    import torch

    try:
        prof.__exit__(None, None, None)
    except BaseException:
        pass
    try:
        if torch._C._autograd._profiler_enabled():
            torch.autograd._disable_profiler()
    except BaseException:
        pass


def mark(step):
    """Leaves a zero-length range at this step boundary: ops after it belong to `step`."""
    if _profiler is None:
        return
    enter, exit_ = _profiler[5], _profiler[6]
    exit_(enter(STEP_MARK + str(int(step)), None))


def abort():
    """Stops the profiler and drops what it recorded."""
    global _profiler
    held, _profiler = _profiler, None
    if held is not None:
        _quietly_stop(held[0])


def stop(capture_id, first_step, trace_path):
    """Stops the profiler here (training thread) and processes its results on another thread."""
    global _profiler
    held, _profiler = _profiler, None
    if held is None:
        raise RuntimeError("no capture is running")
    prof, device, memory, shapes, stack = held[:5]
    stopped = time.monotonic()
    try:
        prof.__exit__(None, None, None)  # on CUDA this waits for the device (torch synchronizes)
    except BaseException:
        _quietly_stop(prof)
        raise
    worker = threading.Thread(target=_finish, name="probing-capture", daemon=True,
                              args=(capture_id, prof, first_step, trace_path, device, memory,
                                    shapes, stack, stopped))
    worker.start()


def _finish(capture_id, prof, first_step, trace_path, device, memory, shapes, stack, stopped):
    """[probing-capture thread] rows, then the agent is told (always, error or not)."""
    from . import _agent

    info = {"device": device}
    rows = None
    error = None
    try:
        result = prof.profiler.kineto_results
        if result is None:
            raise RuntimeError("torch.profiler returned no results")
        rows, info["events"] = to_rows(result.events(), first_step, device is not None, memory,
                                       shapes, stack)
    except BaseException as e:  # reported to the client, never raised into the program
        error = f"{type(e).__name__}: {e}"
        rows = None
    if trace_path and error is None:
        try:
            prof.export_chrome_trace(trace_path)
            add_hta_fields(trace_path, first_step)
        except BaseException as e:  # the rows are kept; the trace request says why it has none
            info["trace_error"] = f"{type(e).__name__}: {e}"
    info["processing_s"] = time.monotonic() - stopped
    try:
        _agent._capture_finished(capture_id, rows, error, info)
    except BaseException as e:
        sys.stderr.write(f"probing: capture {capture_id} could not be stored: {e}\n")


def _distributed_info():
    """rank, world_size and backend as torch.profiler writes them for a distributed job; from
    torch.distributed when it is initialised, else from the launcher's environment."""
    import os

    info = {"backend": "", "rank": int(os.environ.get("RANK", "0") or 0),
            "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1)}
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            info = {"backend": dist.get_backend(), "rank": dist.get_rank(),
                    "world_size": dist.get_world_size()}
    except BaseException:
        pass
    return info


def add_hta_fields(trace_path, first_step):
    """Makes a capture's Chrome trace one that Holistic Trace Analysis reads as torch.profiler's
    own: a top-level "distributedInfo" (rank, world_size, backend; torch.profiler adds it only
    when torch.distributed is initialised as it starts) so that the traces of several ranks do
    not all count as rank 0, and one "ProfilerStep#N" span per captured step (what
    torch.profiler.schedule writes), from the agent's "probing::step N" boundary marks: step N
    runs from its mark (the first step: from the start of the trace) to the next mark (the last
    step: to the end of the trace), on the marks' thread."""
    import json

    with open(trace_path) as f:
        trace = json.load(f)
    if not isinstance(trace.get("distributedInfo"), dict):
        trace["distributedInfo"] = _distributed_info()
    events = trace.get("traceEvents") or []
    if not any(str(e.get("name", "")).startswith("ProfilerStep#") for e in events):
        marks = sorted((float(e["ts"]), int(e["name"][len(STEP_MARK):]), e.get("pid"), e.get("tid"))
                       for e in events
                       if e.get("ph") == "X" and str(e.get("name", "")).startswith(STEP_MARK)
                       and "ts" in e)
        timed = [e for e in events if e.get("ph") == "X" and "ts" in e]
        if timed:
            begin = min(float(e["ts"]) for e in timed)
            end = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed)
            pid, tid = (marks[0][2], marks[0][3]) if marks else (timed[0].get("pid"),
                                                                 timed[0].get("tid"))
            bounds = [(begin, int(first_step))] + [(ts, step) for ts, step, _, _ in marks]
            for i, (ts, step) in enumerate(bounds):
                stop = bounds[i + 1][0] if i + 1 < len(bounds) else end
                if stop <= ts:
                    continue
                events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                               "pid": pid, "tid": tid, "ts": ts, "dur": stop - ts,
                               "args": {"External id": 0, "Record function id": 0}})
            trace["traceEvents"] = events
    tmp = trace_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(trace, f)
    import os

    os.replace(tmp, trace_path)


class _Node:
    """One CPU event placed in its thread's nesting: an op or a record_function range (a row),
    or a module range or Python frame (not rows: "transparent", their time stays with the op or
    range around them, as in a profile taken without probing)."""

    __slots__ = ("start", "end", "thread", "name", "parent", "owner", "child_ns", "kernel_ns",
                 "device_ns", "cpu_mem", "device_mem", "context", "sequence_nr", "fwd_thread",
                 "shapes", "frames", "is_async", "transparent", "python", "module")

    def __init__(self, start, end, thread, name):
        self.start, self.end, self.thread, self.name = start, end, thread, name
        self.parent = None   # innermost enclosing event on the thread
        self.owner = None    # innermost enclosing row event: where this one's time is taken off
        self.child_ns = self.kernel_ns = self.device_ns = 0
        self.cpu_mem = self.device_mem = 0
        self.context = None  # innermost enclosing module range, backward function or optimizer
        self.sequence_nr = -1
        self.fwd_thread = 0
        self.shapes = None
        self.frames = ()     # user Python frames around it, innermost first (--stack)
        self.is_async = False
        self.transparent = False
        self.python = False
        self.module = None   # backward functions: the module their forward ran in


def _library_prefixes():
    """Where torch's and probing's own files are: their frames are left out of stacks."""
    import os

    import torch

    prefixes = ["torch/", "probing/", "<"]  # torch names its files relative to site-packages
    for module in (torch, sys.modules[__package__]):
        prefixes.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return tuple(prefixes)


def _user_frame(name, library):
    """Whether a Python-frame event ("file(line): function") is the program's own code."""
    return ".py(" in name and not name.startswith(library)


def to_rows(events, first_step, with_device, memory, shapes, stack):
    """Aggregates a profiler's events (torch's _KinetoEvent list) into torch_ops rows:
    (step, name, module, stage, device_type, calls, self_cpu_us, total_cpu_us, self_device_us,
    total_device_us, self_cpu_memory, self_device_memory, input_shapes, stack), sorted by step.
    Returns (rows, number of events read)."""
    from torch.autograd import DeviceType

    cpu = DeviceType.CPU
    marks = []
    nodes = []          # CPU events that nest
    loose = []          # async CPU events: a row each, outside the nesting
    mem_records = []    # (thread, time, cpu bytes, device bytes)
    device_events = []  # (linked correlation id, name, duration ns)
    by_correlation = {}
    runtime = []        # CPU-side device runtime calls (cudaLaunchKernel): nest under their op
    count = 0
    for e in events:
        count += 1
        name = e.name()
        if name == "[memory]":
            if memory:
                nbytes = e.nbytes()
                on_cpu = e.device_type() == cpu
                mem_records.append((e.start_thread_id(), e.start_ns(), nbytes if on_cpu else 0,
                                    0 if on_cpu else nbytes))
            continue
        if name in HIDDEN or getattr(e, "is_hidden_event", lambda: False)():
            continue
        if e.device_type() != cpu:
            activity = e.activity_type() if hasattr(e, "activity_type") else "kernel"
            if activity in DEVICE_ACTIVITIES:
                device_events.append((e.linked_correlation_id(), name, e.duration_ns()))
            continue
        if name.startswith(STEP_MARK):
            marks.append(e.start_ns())
            continue
        start, end = e.start_ns(), e.end_ns()
        end_thread = e.end_thread_id()
        # A range still open when the profiler stopped (the optimizer step in whose post-hook
        # the capture ends) has no end thread and ends at the stop: it nests like the others.
        node = _Node(start, max(end, start), e.start_thread_id(), name)
        node.is_async = bool(e.is_async()) or (end_thread not in (0, node.thread))
        if getattr(e, "is_python_function", lambda: False)():
            node.python = node.transparent = True
            if node.is_async:
                continue
            nodes.append(node)
            continue
        node.transparent = name.startswith(MODULE_RANGE)  # the agent's ranges
        node.sequence_nr = e.sequence_nr()
        node.fwd_thread = e.fwd_thread_id()
        if shapes:
            node.shapes = str(e.shapes())
        linked = e.linked_correlation_id()
        if linked > 0:
            runtime.append((linked, node))
        else:
            by_correlation[e.correlation_id()] = node
        (loose if node.is_async else nodes).append(node)
    # Runtime calls run on the op's thread for nesting purposes, as torch does.
    for linked, node in runtime:
        op = by_correlation.get(linked)
        if op is not None:
            node.thread = op.thread

    _nest(nodes, mem_records)
    _attribute(nodes, stack)
    for linked, _name, duration in device_events:
        op = by_correlation.get(linked)
        if op is not None:
            op.kernel_ns += duration
    # Inclusive device time: children come after parents in `nodes`, so walk it backwards.
    for node in reversed(nodes):
        node.device_ns += node.kernel_ns
        if node.owner is not None:
            node.owner.device_ns += node.device_ns

    marks.sort()

    def step_of(t):
        return first_step + bisect.bisect_right(marks, t)

    groups = {}

    def add(key, self_cpu, total_cpu, self_dev, total_dev, cpu_mem, dev_mem):
        g = groups.get(key)
        if g is None:
            groups[key] = [1, self_cpu, total_cpu, self_dev, total_dev, cpu_mem, dev_mem]
        else:
            g[0] += 1
            g[1] += self_cpu
            g[2] += total_cpu
            g[3] += self_dev
            g[4] += total_dev
            g[5] += cpu_mem
            g[6] += dev_mem

    def stack_of(node):
        return ("; ".join(node.frames) or None) if stack else None

    for node in nodes:
        if node.transparent:
            continue
        module, stage = _module_of(node)
        total = node.end - node.start
        add((step_of(node.start), node.name, module, stage, "cpu", node.shapes, stack_of(node)),
            total - node.child_ns, total, node.kernel_ns, node.device_ns, node.cpu_mem,
            node.device_mem)
    for node in loose:
        module, stage = _module_of(node)
        add((step_of(node.start), node.name, module, stage, "cpu", node.shapes, None),
            0, node.end - node.start, 0, 0, 0, 0)
    for linked, name, duration in device_events:
        op = by_correlation.get(linked)
        if op is None:
            continue
        module, stage = _module_of(op)
        add((step_of(op.start), name, module, stage, "cuda", None, stack_of(op)),
            0, 0, duration, duration, 0, 0)

    rows = []
    for (step, name, module, stage, device_type, shape_text, stack_text), g in groups.items():
        is_kernel = device_type != "cpu"
        rows.append((step, name, module, stage, device_type, g[0],
                     None if is_kernel else g[1] / 1000.0,
                     None if is_kernel else g[2] / 1000.0,
                     g[3] / 1000.0 if with_device else None,
                     g[4] / 1000.0 if with_device else None,
                     g[5] if memory and not is_kernel else None,
                     g[6] if memory and with_device and not is_kernel else None,
                     shape_text, stack_text))
    rows.sort(key=lambda r: (r[0], r[4], -(r[6] or 0.0), r[1], r[2] or "", r[12] or "",
                             r[13] or ""))
    return rows, count


def _nest(nodes, mem_records):
    """Per thread, an event inside another's interval is its child. Sets parent (innermost
    enclosing event), owner (innermost enclosing row event) and the owner's child time, and
    charges each memory record to the row event open on its thread at that time. Leaves
    `nodes` sorted by start, parents before children."""
    nodes.sort(key=lambda n: (n.thread, n.start, -n.end))
    mem_records.sort(key=lambda m: (m[0], m[1]))
    m, nmem = 0, len(mem_records)
    stack = []
    thread = None
    for node in nodes:
        while m < nmem and mem_records[m][:2] < (node.thread, node.start):
            _charge(mem_records[m], stack if mem_records[m][0] == thread else [])
            m += 1
        if node.thread != thread:
            thread = node.thread
            stack = []
        while stack and (node.start >= stack[-1].end or node.end > stack[-1].end):
            stack.pop()
        if stack:
            parent = stack[-1]
            node.parent = parent
            node.owner = parent.owner if parent.transparent else parent
            if node.owner is not None and not node.transparent:
                node.owner.child_ns += node.end - node.start
        stack.append(node)
    while m < nmem:
        _charge(mem_records[m], stack if mem_records[m][0] == thread else [])
        m += 1
    nodes.sort(key=lambda n: (n.start, -n.end))  # stable: parents stay before children


def _charge(record, stack):
    t = record[1]
    while stack and stack[-1].end <= t:
        stack.pop()
    if stack:
        node = stack[-1]
        target = node.owner if node.transparent else node
        if target is not None:
            target.cpu_mem += record[2]
            target.device_mem += record[3]


def _is_context(node):
    """A module range of the agent's, a backward function or an optimizer range. (torch's own
    Python tracer names module frames "nn.Module: Linear_0"; those are frames, not contexts.)"""
    name = node.name
    return not node.python and (name.startswith(MODULE_RANGE) or name.startswith(BACKWARD_RANGE)
                                or name.startswith(OPTIMIZER_RANGES))


def _attribute(nodes, stack):
    """Each node's context: the innermost enclosing module range, backward function or
    optimizer range (parents come before children in `nodes`); with stack, its user frames.
    Then backward functions learn the module of the forward op that created their autograd
    node, through the node's sequence number."""
    forward = {}  # (sequence number, thread) -> (module, frames) of the forward op
    library = _library_prefixes() if stack else ()
    for node in nodes:
        parent = node.parent
        if parent is not None:
            node.context = parent if _is_context(parent) else parent.context
            if stack:
                node.frames = parent.frames
        if stack and node.python and _user_frame(node.name, library):
            node.frames = (node.name,) + node.frames[:STACK_FRAMES - 1]
        context = node.context
        if (context is not None and node.sequence_nr >= 0 and not context.python
                and context.name.startswith(MODULE_RANGE)):
            forward.setdefault((node.sequence_nr, node.thread),
                               (context.name[len(MODULE_RANGE):], node.frames))
    backward_frames = {}
    for node in nodes:
        if node.name.startswith(BACKWARD_RANGE):
            module, frames = forward.get((node.sequence_nr, node.fwd_thread), (None, None))
            node.module = module or node.name[len(BACKWARD_RANGE):]
            if frames is not None:
                backward_frames[node] = frames
    if stack and backward_frames:
        # Backward ops have the frames of the forward op that created their autograd node, as
        # torch gives them (the frames of loss.backward() say nothing).
        for node in nodes:
            context = node.context if node not in backward_frames else node
            if context in backward_frames:
                node.frames = backward_frames[context]


def _module_of(node):
    """(module, stage code) of an event: from itself when it is a backward function or an
    optimizer range, else from its context."""
    context = node if _is_context(node) and not node.transparent else node.context
    if context is None:
        return None, OTHER
    name = context.name
    if name.startswith(MODULE_RANGE):
        return name[len(MODULE_RANGE):], FORWARD
    if name.startswith(BACKWARD_RANGE):
        return context.module, BACKWARD
    return None, OPTIMIZER
