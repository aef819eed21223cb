"""test_pylayout_live.py - the pylayout table of the running CPython, checked on live objects.

Run by meson (`meson test pylayout_live`) as: python3 test_pylayout_live.py <test_pylayout>.
It asks the C test binary for the table of the Python it runs under (--print 3.X), then reads
this interpreter's own thread state, frames, code, str, bytes, type and (3.11+) dict objects
through ctypes at those offsets and compares with what Python says they hold. Exit 77 (meson:
skipped) when this Python has no table (3.13+: its offsets come from _Py_DebugOffsets) or is
not CPython.
Then it runs itself the same way under every CPython of pyenv ($PYENV_ROOT or ~/.pyenv,
versions/3.9 and later), as test_backtrace.py does: each covered version is checked where it
is installed.
"""
import ctypes
import glob
import os
import subprocess
import sys
import threading

failures = 0


def check(ok, what):
    global failures
    print(("ok   - " if ok else "FAIL - ") + what)
    if not ok:
        failures += 1


def ptr(addr):
    return ctypes.c_void_p.from_address(addr).value or 0


def u64(addr):
    return ctypes.c_uint64.from_address(addr).value


def i32(addr):
    return ctypes.c_int32.from_address(addr).value


def lookup(L, keys, values, attr):
    """What pystack.c's keys_lookup does: the address of the value of str key attr in the keys
    object keys (values: a split dict's PyDictValues, or 0), read at the table's offsets."""
    entries = ctypes.c_int64.from_address(keys + L["keys.nentries"]).value
    index_log2 = ctypes.c_uint8.from_address(keys + L["keys.log2_index_bytes"]).value
    kind = ctypes.c_uint8.from_address(keys + L["keys.kind"]).value
    prefix = "keys.entry_" if kind == 0 else "keys.unicode_entry_"
    start = keys + L["keys.indices"] + (1 << index_log2)
    for i in range(entries):
        entry = start + i * L[prefix + "size"]
        key = ptr(entry + L[prefix + "key"])
        if not key or ctypes.cast(key, ctypes.py_object).value != attr:
            continue
        if values:
            return ptr(values + L["values_array"] + 8 * i)
        return ptr(entry + L[prefix + "value"])
    return 0


def check_dicts(L):
    """A Thread's _name is read from its instance dict (3.11+): check every offset of that on
    plain dicts and on an object's managed dict, before and after it is made a real dict."""
    text = {"alpha": "one", "beta": "two"}
    mixed = {1: "int key", "beta": "general entry"}
    for d, kind in ((text, 1), (mixed, 0)):
        keys = ptr(id(d) + L["dict_keys"])
        check(ctypes.c_uint8.from_address(keys + L["keys.kind"]).value == kind and
              not ptr(id(d) + L["dict_values"]) and lookup(L, keys, 0, "beta") == id(d["beta"]),
              "dict of kind %d: ma_keys, its entries and the value of 'beta'" % kind)
    check(ptr(id(text["beta"]) + L["object_type"]) == id(str), "ob_type of a str is str")

    class Named:
        pass

    o = Named()
    o._target = None
    o._name = "worker-%d" % 7
    check(Named.__flags__ & (1 << 4), "a plain class has Py_TPFLAGS_MANAGED_DICT")
    cached = ptr(id(Named) + L["heaptype_cached_keys"])
    before = ptr(id(o) - L["managed_dict_before"])
    if L["managed_values_before"]:  # 3.11: a values pointer and a dict pointer
        values = ptr(id(o) - L["managed_values_before"])
        ok = values and not before
    else:  # 3.12: one word, the values pointer - 1 while there is no dict
        values = before + 1 if before & 1 else 0
        ok = values
    check(ok and lookup(L, cached, values, "_name") == id(o._name),
          "managed dict: split values before the object, _name found through ht_cached_keys")
    made = o.__dict__
    check(ptr(id(o) - L["managed_dict_before"]) == id(made), "managed dict: once made, the dict")
    keys, values = ptr(id(made) + L["dict_keys"]), ptr(id(made) + L["dict_values"])
    check(lookup(L, keys, values, "_name") == id(o._name),
          "managed dict: _name through ma_keys / ma_values (%s)" %
          ("split" if values else "combined"))


def main():
    version = "%d.%d" % sys.version_info[:2]
    if sys.implementation.name != "cpython":
        print("skip: not CPython")
        return 77
    out = subprocess.run([sys.argv[1], "--print", version], capture_output=True, text=True)
    if out.returncode != 0:
        print("skip: no table for Python %s (%s)" % (version, out.stderr.strip()))
        return 77
    L = {k: int(v) for k, v in (line.split() for line in out.stdout.splitlines())}
    api = ctypes.pythonapi
    api.PyThreadState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    tstate = api.PyThreadState_Get()
    interp = api.PyInterpreterState_Get()
    runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))

    check(ptr(runtime + L["runtime_interpreters_head"]) == interp,
          "_PyRuntime.interpreters.head is this (only) interpreter")
    check(ptr(interp + L["interp_threads_head"]) == tstate,
          "interp threads head is this thread's state (the only thread)")
    check(u64(tstate + L["tstate_thread_id"]) == threading.get_ident(),
          "tstate.thread_id is threading.get_ident()")
    if L["tstate_native_id"]:
        check(u64(tstate + L["tstate_native_id"]) == threading.get_native_id(),
              "tstate.native_thread_id is threading.get_native_id()")
    # A ctypes call keeps the GIL (pythonapi is a PyDLL): this thread holds it right now.
    gil = runtime + L["gil_base"] if L["gil_kind"] == 0 else ptr(interp + L["gil_base"])
    check(i32(gil + L["gil_locked"]) == 1 and ptr(gil + L["gil_holder"]) == tstate,
          "the GIL is locked and its last holder is this thread")

    def innermost():
        """Reads this function's own frame (current while ctypes runs) and what it links to."""
        frame = ctypes.c_void_p.from_address(tstate + L["tstate_frame"]).value or 0
        if L["has_cframe"] and frame:
            frame = ctypes.c_void_p.from_address(frame + L["cframe_current_frame"]).value or 0
        if not frame:
            return {"code": 0, "caller_code": 0, "instr": 0, "owner": -1, "caller_local0": 0}
        previous = ptr(frame + L["frame_previous"])
        seen = {"code": ptr(frame + L["frame_code"]),
                "caller_code": ptr(previous + L["frame_code"])}
        if not L["legacy"]:
            seen["instr"] = ptr(frame + L["frame_instr"])
            seen["owner"] = ctypes.c_uint8.from_address(frame + L["frame_owner"]).value
        if L["frame_localsplus"]:
            seen["caller_local0"] = ptr(previous + L["frame_localsplus"])
        return seen

    seen = innermost()
    code = innermost.__code__
    check(seen["code"] == id(code), "frame.f_code is the running function's code")
    check(seen["caller_code"] == id(main.__code__), "frame.previous is the caller's frame (main)")
    check(ptr(id(code) + L["code_filename"]) == id(code.co_filename), "code.co_filename")
    name = code.co_qualname if sys.version_info >= (3, 11) else code.co_name
    check(ptr(id(code) + L["code_qualname"]) == id(name), "code.co_qualname (3.9/3.10: co_name)")
    check(i32(id(code) + L["code_firstlineno"]) == code.co_firstlineno, "code.co_firstlineno")
    table = code.co_linetable if sys.version_info >= (3, 10) else code.co_lnotab
    check(ptr(id(code) + L["code_linetable"]) == id(table), "code.co_linetable / co_lnotab")
    if not L["legacy"]:
        start = id(code) + L["code_adaptive"]
        check(start <= seen["instr"] < start + len(code.co_code),
              "frame.prev_instr points into co_code_adaptive")
        check(seen["owner"] == 0, "frame.owner is FRAME_OWNED_BY_THREAD")

    class Worker:
        def method(self):
            return innermost()

    w = Worker()
    if L["frame_localsplus"]:
        check(w.method()["caller_local0"] == id(w), "frame.localsplus[0] of a method is self")
        check(u64(id(Worker) + L["type_flags"]) == Worker.__flags__, "type.tp_flags")
        check(ptr(id(Worker) + L["heaptype_cached_keys"] - 8) == id(Worker.__qualname__),
              "heap type: ht_qualname sits just before ht_cached_keys")

    if L["names"]:
        check_dicts(L)

    for text, kind, size in (("ascii text", 1, L["ascii_size"]),
                             ("caf\u00e9", 1, L["compact_size"]),
                             ("\u4e2d\u6587", 2, L["compact_size"])):
        state = ctypes.c_uint32.from_address(id(text) + L["unicode_state"]).value
        raw = ctypes.string_at(id(text) + size, len(text) * kind)
        check(u64(id(text) + L["unicode_length"]) == len(text) and (state >> 2) & 7 == kind and
              raw == text.encode("latin-1" if kind == 1 else "utf-16-le"),
              "str %r: length, kind and characters" % text)
    data = b"bytes object"
    check(u64(id(data) + L["bytes_size"]) == len(data) and
          ctypes.string_at(id(data) + L["bytes_sval"], len(data)) == data, "bytes: size and data")
    print("%s: %d failed" % (version, failures))
    return 1 if failures else 0


def other_pythons():
    """Runs this script under each pyenv CPython 3.x; returns the number that failed."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    failed = 0
    for python in sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3"))):
        minor = os.path.basename(os.path.dirname(os.path.dirname(python))).split(".")[1]
        if not minor.isdigit() or int(minor) < 9:  # older than what backtrace reads
            continue
        run = subprocess.run([python, __file__, sys.argv[1]], capture_output=True, text=True,
                             env=dict(os.environ, PB_PYLAYOUT_ONE="1"))
        print("%s: %s" % (python, run.stdout.strip().splitlines()[-1:] or run.stderr.strip()))
        if run.returncode not in (0, 77):
            print(run.stdout + run.stderr)
            failed += 1
    return failed


if __name__ == "__main__":
    rc = main()
    if rc == 1 or os.environ.get("PB_PYLAYOUT_ONE"):
        sys.exit(rc)
    failed = other_pythons()
    sys.exit(1 if failed else rc)
