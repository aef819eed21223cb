"""`probing --help` and each command's --help say which targets the command takes, recording
files included, and what they say is what the commands do: every command whose help lists a
recording file among its targets reads one, and every other command refuses one."""
import re
import subprocess

import pytest

from conftest import PYTHON, WORKLOADS

RECORDING_TARGET = ("TARGET: a pid, host:port, socket path, or a recording file (run.db, written "
                    "by 'probing run -o' or 'record -o'); may also be given as -t TARGET.")


def commands_with_a_target(cli):
    usage = cli("--help").stdout.split("\nCommands:")[0]
    return re.findall(r"^  probing <(?:target|pid)[^>]*> (\w+)", usage, re.M)


def target_line(cli, command):
    text = cli(command, "--help").stdout
    return " ".join(text[text.index("\nTARGET: ") + 1:].split())


@pytest.fixture(scope="module")
def recording(cli, session_launcher, session_dir):
    path = session_dir / "help-targets.db"
    t = session_launcher.command([cli.binary, "run", "-o", path, "--", PYTHON, "-u",
                                  WORKLOADS / "inference.py", "--steps", 3], name="help-targets")
    assert t.proc.wait(timeout=240) == 0, t.describe()
    return path


def test_main_help_lists_recording_files_among_targets(cli):
    text = " ".join(cli("--help").stdout.split())
    assert ("A target is a pid (12345), host:port or [::1]:port (an agent started with "
            "PROBING_LISTEN), the path of an agent socket, or a recording file (run.db, written "
            "by 'probing run -o' or 'record -o'; query, tables, info, report, timeline, "
            "flamegraph, export and ui read it after the process is gone).") in text


def test_every_command_help_says_whether_it_reads_recordings(cli, recording, tmp_path):
    commands = commands_with_a_target(cli)
    assert len(commands) >= 12, commands
    readers = re.search(r"recording file \(run\.db, written by 'probing run -o' or 'record -o'; "
                        r"([\w, ]+) read it", " ".join(cli("--help").stdout.split())).group(1)
    readers = set(re.split(r", | and ", readers))
    assert readers <= set(commands)
    for command in commands:
        line = target_line(cli, command)
        if command in readers:
            assert line == RECORDING_TARGET, (command, line)
            if command == "ui":  # a server: it reads the file and serves until stopped
                ui = subprocess.Popen([str(cli.binary), str(recording), "ui"], env=cli.env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    assert "http://127.0.0.1:" in ui.stdout.readline(), command
                finally:
                    ui.kill()
                    ui.communicate(timeout=60)
                continue
            if command == "export" and subprocess.run([PYTHON, "-c", "import pyarrow"],
                                                      capture_output=True).returncode != 0:
                continue  # export needs pyarrow (test_parquet.py skips with the reason)
            extra = {"query": ["SELECT COUNT(*) FROM python.steps"],
                     "timeline": ["-o", tmp_path / "t.json"],
                     "flamegraph": ["-o", tmp_path / "f.svg"],
                     "export": ["--parquet", tmp_path / "parquet"]}.get(command, [])
            # export runs pyarrow in $PROBING_PYTHON, else python3 on PATH: the tests' Python
            r = cli(recording, command, *extra, check=False,
                    env=dict(cli.env, PROBING_PYTHON=PYTHON) if command == "export" else None)
            assert r.returncode == 0, (command, r.stderr)
        elif command in ("backtrace", "inject"):
            assert line == (f"TARGET: the pid of a Python process on this machine (a recording "
                            f"file has no process to {command}); may also be given as -t "
                            f"TARGET."), line
            r = cli(recording, command, check=False)
            assert r.returncode != 0 and r.stderr.startswith("probing: "), (command, r)
        else:
            assert line == (f"TARGET: a pid, host:port or socket path of a live process (a "
                            f"recording file, written by 'probing run -o' or 'record -o', has no "
                            f"process to {command}); may also be given as -t TARGET."), line
            extra = {"eval": ["print(1)"], "record": ["-o", tmp_path / "r.db"]}.get(command, [])
            r = cli(recording, command, *extra, check=False)
            assert r.returncode != 0 and r.stderr.startswith("probing: "), (command, r)
