"""A process whose main thread holds the GIL in a long C call, for `probing <pid> backtrace`.

The main thread runs a regular expression with catastrophic backtracking (hours of C code in
_sre without releasing the GIL) while a second thread sleeps in a loop. Lines the tests look
for carry a "# frame:" marker. Prints BUSY just before the match. Killed by the test.
"""
import re
import threading
import time


def tick():
    while True:
        time.sleep(0.01)  # frame: tick


def backtrack():
    return re.match(r"(a+)+$", "a" * 64 + "b")  # frame: backtrack


def main():
    threading.Thread(target=tick, name="ticker", daemon=True).start()
    print("BUSY", flush=True)
    backtrack()  # frame: main


main()  # frame: module
