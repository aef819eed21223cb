"""A process that deadlocks on purpose, for `probing <pid> backtrace` (stdlib only, any CPython).

Two threads take two locks in opposite orders and block forever; the main thread waits in
join(). Lines the tests look for carry a "# frame:" marker. Prints DEADLOCKED once both threads
hold their first lock. Killed by the test.
"""
import threading

first = threading.Lock()
second = threading.Lock()
holding = threading.Barrier(3)


def take_first_then_second():
    with first:
        holding.wait()
        with second:  # frame: left
            pass


def take_second_then_first():
    with second:
        holding.wait()
        with first:  # frame: right
            pass


def main():
    left = threading.Thread(target=take_first_then_second, name="left")
    right = threading.Thread(target=take_second_then_first, name="right")
    # 3.11+: left keeps its attributes as values beside the object, right in a dict made by
    # asking for it, so the test reads a thread name both ways
    vars(right)
    left.start()
    right.start()
    holding.wait()
    print("DEADLOCKED", flush=True)
    left.join()  # frame: join


main()  # frame: module
