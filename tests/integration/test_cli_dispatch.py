"""How `probing` reads its command line before any command runs (src/cli/main.c, options.c,
usage.c, help.c, suggest.c): where the target goes, what each command needs by its row in the
command table (a target or none, a pid worked on from outside, text or none, one target or
several, a command line to run), and the exact message and exit status of every mistake. No
process is traced here: each case is answered before a request would be sent."""
import re

import pytest

NO_PID = "999999999"  # above any pid_max: no such process


def run(cli, *args):
    return cli(*args, check=False)


@pytest.mark.parametrize("args, message", [
    (["-t", "1", "-t", "2", "query", "SELECT 1"],
     "probing: two targets given ('1' and '2'); give one\n"),
    (["1", "query", "-t", "2", "SELECT 1"],
     "probing: two targets given ('1' and '2'); give one\n"),
    (["1"], "probing: missing command after the target: probing 1 query \"SELECT ...\" (see "
            "'probing --help')\n"),
    (["1", "2", "query", "SELECT 1"],
     "probing: query takes one target, not 2; only export takes several\n"),
    (["exporter", "-t", "1"], "probing: exporter does not take a target (got '1')\n"),
    (["-t", "5", "run", "--", "true"],
     "probing: run does not take a target; it starts a new process: probing run -- python "
     "train.py\n"),
    (["run", "--"], "probing: run needs a command after '--': probing run -- python train.py\n"),
    (["1", "tables", "x"], "probing: tables takes no arguments (got 'x'); see 'probing tables "
                           "--help'\n"),
    (["detach"], "probing: detach needs a target: probing <target> detach (see 'probing list')\n"),
    (["1", "query", "--deadline"], "probing: option --deadline needs a value\n"),
    (["1", "query", "--bogus", "SELECT 1"],
     "probing: unknown option '--bogus' for query; see 'probing query --help' (use -- before an "
     "argument that starts with '-')\n"),
    (["--bogus"], "probing: unknown option '--bogus'; see 'probing --help'\n"),
    (["1", "eval", "--timeout", "0", "x"],
     "probing: --timeout wants a number of seconds above 0 (up to 604800), not '0'\n"),
    (["1", "list"], "probing: list does not take a target (got '1')\n"),
    (["zzzz"], "probing: unknown command 'zzzz'; see 'probing --help'\n"),
    (["1", "qury", "x"], "probing: unknown command 'qury'; did you mean 'query'? (see 'probing "
                         "help')\n"),
])
def test_command_line_mistakes(cli, args, message):
    r = run(cli, *args)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", message)


def test_a_pid_command_gets_its_pid_unresolved(cli):
    """inject and backtrace work on a process from outside: their target is not looked up as an
    agent first (which says "no such process: ..."); the command says what is wrong itself."""
    r = run(cli, NO_PID, "query", "SELECT 1")
    assert (r.returncode, r.stderr) == (1, f"probing: no such process: {NO_PID}\n")
    r = run(cli, NO_PID, "inject")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f"probing: no process {NO_PID}\n")
    r = run(cli, "inject", "-t", "abc")
    assert (r.returncode, r.stderr) == (
        2, "probing: inject loads the agent into a process and needs its pid, not 'abc': "
           "probing <pid> inject\n")


def test_help_and_version(cli):
    full = run(cli, "--help")
    assert full.returncode == 0 and full.stdout.startswith(
        "probing - look inside a running PyTorch process\n\nUsage:\n")
    bare = run(cli)  # no command: the same help, on stderr, as a usage error
    assert (bare.returncode, bare.stdout, bare.stderr) == (2, "", full.stdout)
    assert run(cli, "-t", "1", "--help").stdout == full.stdout
    version = run(cli, "--version")
    assert version.returncode == 0 and version.stdout.startswith("probing ")
    assert run(cli, "-V").stdout == version.stdout
    one = run(cli, "1", "detach", "--help")  # --help wins over the target check of detach
    assert (one.returncode, one.stdout) == (0, run(cli, "help", "detach").stdout)
    assert one.stdout.endswith("has no process to detach); may also be\ngiven as -t TARGET.\n")
    # an unknown option is reported even after --help
    r = run(cli, "detach", "--help", "--bogus")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith("probing: unknown option '--bogus' for detach")


def test_help_lists_each_option_the_parser_takes(cli):
    """A command's option lines come from its option table (cmd/cmd_<name>.c), the table the
    parser reads: every option a command's --help lists is accepted by that command, with its
    value when the line names one, and every --option of the usage line is one the command
    takes; a made-up option next to it is refused."""
    usage = run(cli, "--help").stdout.split("\nCommands:")[0]
    commands = re.findall(r"^  probing (?:<[^>]+> )?(\w+)", usage, re.M)
    assert {"query", "capture", "exporter", "run", "report"} <= set(commands), commands
    listed = 0
    for command in commands:
        text = run(cli, command, "--help").stdout
        section = text.split("\nOptions:\n")[1].split("\n\n")[0] if "\nOptions:\n" in text else ""
        for line in re.findall(r"^  (-.*)$", section, re.M):
            spelling = re.match(r"(?:-\w, )?(--[\w-]+)( [^ ]+)?", line)
            option = [spelling.group(1)] + (["1"] if spelling.group(2) else [])
            r = run(cli, command, *option, "--help")
            assert (r.returncode, r.stderr) == (0, ""), (command, line, r.stderr)
            listed += 1
        for long_name in re.findall(r"\[(--[\w-]+)", text.split("\n")[0]):
            assert f"  {long_name}" in section or f", {long_name}" in section, (command, long_name)
        r = run(cli, command, "--no-such-option", "--help")
        assert r.returncode == 2 and r.stderr.startswith(
            f"probing: unknown option '--no-such-option' for {command}"), (command, r.stderr)
    assert listed >= 25, listed


def test_usage_lines_come_from_the_option_tables(cli):
    """Each usage line is made from the command's option table (usage.c): the target its needs
    name, its rows in order, the positional arguments where the table places them, and a row's
    own text where a flat list cannot say it (an option that must be given, --deadline only with
    --ranks, alternatives). The same line heads the command's --help and the error for a missing
    target."""
    usage = run(cli, "--help").stdout.split("\nUsage:\n")[1].split("\n\n")[0].splitlines()
    assert usage == [
        "  probing list [-f table|json]",
        '  probing <target> query "SQL" [-f table|csv|json] [--ranks all|0,2-5 [--deadline S]]',
        '  probing <target> eval "CODE" [--timeout S]',
        "  probing <target> tables [-f table|json]",
        "  probing <target> info [-f table|json]",
        "  probing run [-o FILE.db [--force]] -- COMMAND [ARGS...]",
        "  probing <target> report [--json] [--last N] [RANK.db ...]",
        "  probing <target> timeline -o FILE.json [--ranks all|0,2-5 [--deadline S]]",
        "  probing <target> flamegraph (-o FILE.svg | --folded [-o FILE]) [--stage S]",
        "  probing <target> detach",
        "  probing <pid> backtrace [--native] [-f table|json]",
        "  probing <pid> inject [--timeout S]",
        "  probing <target> capture [--steps N] [--memory] [--shapes] [--stack] [-o FILE.json] "
        "[--timeout S] [--ranks all|0,2-5 [-o DIR] [--deadline S]]",
        "  probing <target> record [-o FILE.db [--force] | --stop]",
        "  probing exporter [--listen ADDR:PORT] [--sd FILE] [--timeout S]",
        "  probing <target-or-recording...> export --parquet DIR [--force]",
        "  probing compare BEFORE AFTER [--json] [-f table|csv] [--min-effect PCT] "
        "[--fail-if-slower PCT]",
        "  probing <target> ui [--listen ADDR:PORT] [--open]",
        "  probing <target> ranks [-f table|csv|json] [--deadline S]",
        "  probing <target> stragglers [--json] [--deadline S] [--last N]",
        "  probing <target> hang [--deadline S]",
        "  probing mcp [--allow-eval]",
        "  probing doctor [-f table|json]",
    ]
    for line in usage:
        command = re.match(r"  probing (?:<[^>]+> )?(\w+)", line).group(1)
        assert run(cli, "help", command).stdout.startswith(f"Usage: {line[2:]}\n\n"), command
        if "<" in line:
            r = run(cli, command)
            assert (r.returncode, r.stderr) == (
                2, f"probing: {command} needs a target: {line[2:]} (see 'probing list')\n")
