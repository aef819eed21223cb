"""`probing doctor`: which of probing's measurement paths this machine, this Python and this torch
give, and what would enable the others. Run by the probing command (src/cli/cmd/cmd_doctor.c) as
`python -m probing._doctor [--json]` with the Python it finds ($PROBING_PYTHON, else the python3
beside the probing executable, else python3 on PATH) and PROBING=0 (no agent starts here).

It reads; it never builds or installs anything. The same paths, as a running job has them, are
in `probing <target> info`.
"""
import json
import os
import platform
import sys


def _agent():
    try:
        from . import _agent
        return "loads", _agent.__version__
    except Exception as exc:
        return "does not load: %s" % exc, None


def _torch():
    try:
        import torch
        return torch, None
    except Exception as exc:
        return None, "%s: %s" % (type(exc).__name__, exc)


def _backward(torch):
    """(active, what) for module backward timing."""
    if os.environ.get("PROBING_BACKWARD", "1").strip() == "0":
        return False, "off (PROBING_BACKWARD=0); unset it to time module backward"
    if os.environ.get("PROBING_AUTOGRAD_EXT", "1").strip() == "0":
        return False, "python probes (PROBING_AUTOGRAD_EXT=0); unset it for the C++ extension"
    from . import _autograd_build

    packaged = [f for f in os.listdir(os.path.dirname(os.path.abspath(__file__)))
                if f.startswith("_autograd.") and f.endswith(".so")]
    if packaged:
        try:
            import probing._autograd  # noqa: F401
            return True, "extension (probing._autograd, installed with the package)"
        except ImportError as exc:
            return False, "python probes: the installed probing._autograd is not usable (%s); " \
                "reinstall probing against this torch" % exc
    state, d, text = _autograd_build.status(torch)
    if state == "built":
        return True, "extension (probing._autograd %s)" % text
    if state == "building":
        return False, "python probes for now: probing._autograd is %s" % text
    if state == "absent":
        if os.environ.get("PROBING_AUTOGRAD_BUILD", "1").strip() == "0":
            return False, "python probes: probing._autograd is not built and PROBING_AUTOGRAD_BUILD=0; " \
                "unset it and the first run builds it into %s" % d
        return False, "python probes until probing._autograd is built: %s" % text
    if state == "failed":
        return False, "python probes: %s" % text
    if state == "refused":
        return False, "python probes: probing._autograd's build cache is refused: %s" % text
    return False, "python probes: probing._autograd cannot be built here: %s" % text


def _gil():
    ms = os.environ.get("PROBING_GIL_SAMPLE_MS", "10").strip()
    impl = platform.python_implementation()
    v = sys.version_info
    if impl != "CPython" or not ((3, 9) <= v[:2] <= (3, 13)):
        return False, "not supported on %s %d.%d (CPython 3.9-3.13 with a GIL); python.gil stays empty" % (
            impl, v[0], v[1])
    if getattr(sys, "_is_gil_enabled", None) and not sys._is_gil_enabled():
        return False, "not supported: this Python runs without a GIL"
    if ms in ("0", "-1") or (ms.lstrip("-").isdigit() and int(ms) <= 0):
        return False, "off (PROBING_GIL_SAMPLE_MS=%s); unset it to sample every 10 ms" % ms
    return True, "samples who holds the GIL every %s ms (python.gil)" % (ms or "10")


def _nvml():
    import ctypes

    name = os.environ.get("PROBING_NVML_LIBRARY") or "libnvidia-ml.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return False, "%s not found (it comes with the NVIDIA driver); system.gpu stays empty" % name
    try:
        rc = lib.nvmlInit_v2()
        if rc != 0:
            return False, "%s loads but nvmlInit failed (error %d): is the NVIDIA driver running?" % (name, rc)
        n = ctypes.c_uint(0)
        rc = lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        lib.nvmlShutdown()
        if rc != 0:
            return False, "%s: nvmlDeviceGetCount failed (error %d)" % (name, rc)
        return True, "%s: %d GPU%s (system.gpu: memory, utilisation, power, clocks)" % (
            name, n.value, "" if n.value == 1 else "s")
    except AttributeError as exc:
        return False, "%s is not NVML (%s)" % (name, exc)


def _cuda(torch):
    if torch is None:
        return False, "torch is not importable"
    if not getattr(torch.version, "cuda", None):
        return False, "torch %s is built without CUDA: install a CUDA build of torch on a machine " \
            "with an NVIDIA GPU; module rows are host times" % torch.__version__
    try:
        n = torch.cuda.device_count()
    except Exception:
        n = 0
    if n == 0:
        return False, "torch %s has CUDA %s but sees no GPU (CUDA_VISIBLE_DEVICES, driver?)" % (
            torch.__version__, torch.version.cuda)
    return True, "CUDA %s, %d device%s: capture records kernel times (torch.profiler); " \
        "module rows are host times" % (torch.version.cuda, n, "" if n == 1 else "s")


def facts():
    agent, version = _agent()
    torch, torch_error = _torch()
    doc = {
        "machine": "%s, %s, %d CPUs" % (platform.node(), platform.platform(terse=True), os.cpu_count() or 0),
        "python": "%s (%s %s)" % (sys.executable, platform.python_implementation(), platform.python_version()),
        "probing": "%s at %s (agent %s)" % (version or "?", os.path.dirname(os.path.abspath(__file__)), agent),
    }
    if torch is None:
        doc["torch"] = "not importable (%s): the torch hooks, backward timing and CUDA paths need it" % torch_error
    else:
        abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
        doc["torch"] = "%s at %s (C++ ABI %d)" % (torch.__version__, os.path.dirname(torch.__file__), abi)
    paths = {}
    if torch is not None:
        paths["backward"] = _backward(torch)
    else:
        paths["backward"] = (False, "needs torch")
    paths["gil"] = _gil()
    paths["nvml"] = _nvml()
    paths["cuda"] = _cuda(torch)
    doc["paths"] = {k: {"active": a, "what": w} for k, (a, w) in paths.items()}
    return doc


LABELS = (("machine", "machine"), ("python", "python"), ("probing", "probing"), ("torch", "torch"))
PATH_LABELS = (("backward", "backward timing"), ("gil", "GIL sampler"), ("nvml", "NVML"),
               ("cuda", "CUDA device timing"))


def main(argv):
    doc = facts()
    if "--json" in argv:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    for key, label in LABELS:
        sys.stdout.write("%-19s %s\n" % (label, doc[key]))
    for key, label in PATH_LABELS:
        p = doc["paths"][key]
        sys.stdout.write("%-19s %s %s\n" % (label, "yes" if p["active"] else "no ", p["what"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
