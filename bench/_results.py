"""bench/RESULTS.md: each benchmark owns the section between `<!-- BEGIN name -->` and
`<!-- END name -->` and replaces only that; the text around the sections is written by hand."""
import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def write_section(name, body):
    """Put body between the markers of section `name` in RESULTS.md (appended when absent)."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    text = open(RESULTS).read() if os.path.exists(RESULTS) else "# Benchmark results\n"
    block = f"{begin}\n{body.strip(chr(10))}\n\n{end}"
    a = text.find(begin)
    b = text.find(end, a) if a >= 0 else -1
    if a >= 0 and b >= 0:
        text = text[:a] + block + text[b + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(RESULTS, "w") as f:
        f.write(text)
    print(f"wrote {RESULTS}")


def cpu_name():
    """The CPU's model name from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine():
    """'Machine: <arch>, <CPU>, <n> cores; Python <v>, torch <v>.' for a section's first line."""
    import platform
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    return (f"Machine: {platform.machine()}, {cpu_name()}, {os.cpu_count()} cores; Python "
            f"{platform.python_version()}, torch {torch_version}.")
