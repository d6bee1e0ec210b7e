"""A cell's output teed at the file descriptors (pats.sweep.logs.tee_output), seen from outside the
process: each line reaches the terminal after the cell's prefix (none by default) and the log as
printed, lines a carriage return ends (progress bars) are passed on without waiting for a newline,
of which the log keeps each bar's last state, a line written in pieces reaches the log whole, and after the block stdout and stderr go where they
went before, with no descriptor left open. From the mutation runs of logs.py.

stdout and stderr have a pipe and a pump each, so the order of two lines written moments apart on
different streams is a race. The child scripts here do not sleep and hope: before writing on the other
stream they wait until the log holds the line before (`landed`) or until the pump has read the pipe
empty (`drained`), so each test's outcome is the same on an idle machine and a loaded one (a timed
version of these tests let mutants through under load)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Defined in each child: wait for the log to end with `tail`, or for the pump to have read what was
# written on `fd`, for at most WAIT_S (a mutant that never copies fails the test then, not hangs it).
WAIT = textwrap.dedent(
    """
    import fcntl, os, struct, sys, termios, time
    from pathlib import Path
    from pats.sweep.logs import tee_output

    WAIT_S = 3.0

    def until(done, what):
        deadline = time.monotonic() + WAIT_S
        while not done():
            if time.monotonic() > deadline:
                sys.exit(f"waited {WAIT_S} s for {what}")
            time.sleep(0.005)

    def landed(tail):
        until(lambda: Path(sys.argv[1]).read_bytes().endswith(tail), f"the log to end with {tail!r}")

    def drained(fd):  # the bytes not yet read from the pipe behind fd (FIONREAD works on either end)
        until(lambda: struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\\0" * 4))[0] == 0,
              f"the pump to read fd {fd}")
    """
)

SCRIPT = WAIT + textwrap.dedent(
    """
    with tee_output(Path(sys.argv[1]), *sys.argv[2:]):
        os.write(1, b"one\\ntwo\\n")
        print("three")
        landed(b"three\\n")
        os.write(2, b"bar 1/2\\r")
        drained(2)  # a carriage return ends a line: on the terminal at once, in the log only if last
        os.write(1, b"four\\n")
        landed(b"four\\n")
        os.write(2, b"bar 2/2\\n")
    print("after out")
    print("after err", file=sys.stderr)
    """
)


def child(tmp_path, script: str, *args: str) -> tuple[str, str, str]:
    """Run `script` with the log's path and `args`; its stdout, stderr and log (bytes decoded: '\r' kept)."""
    log = tmp_path / "log.txt"
    done = subprocess.run([sys.executable, "-c", script, str(log), *args], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode(), done.stderr.decode(), log.read_bytes().decode()


def test_each_line_after_the_prefix_on_the_terminal_as_printed_in_the_log(tmp_path):
    out, err, log = child(tmp_path, SCRIPT, "[cell] ")
    assert out == "[cell] one\n[cell] two\n[cell] three\n[cell] four\nafter out\n"
    assert err == "[cell] bar 1/2\r[cell] bar 2/2\nafter err\n"
    assert log == "one\ntwo\nthree\nfour\nbar 2/2\n"  # the bar's last state only (issue 59)


def test_no_prefix_by_default(tmp_path):
    out, err, log = child(tmp_path, SCRIPT)
    assert out == "one\ntwo\nthree\nfour\nafter out\n" and err == "bar 1/2\rbar 2/2\nafter err\n"


def test_the_log_keeps_a_progress_bars_last_state_and_every_other_line(tmp_path):
    """Issue 59, item 5: the weight-loading bars filled each cell's log.txt with every redraw. A CR LF
    cut in two by the pipe's reads stays one line; a bar the output ends on keeps its last state."""
    script = WAIT + textwrap.dedent(
        """
        with tee_output(Path(sys.argv[1])):
            os.write(2, b"\\rLoading: 0%|")
            drained(2)
            os.write(2, b"\\rLoading: 50%|")
            drained(2)
            os.write(2, b"\\rLoading: 100%|")
            drained(2)
            os.write(2, b"\\n")
            landed(b"Loading: 100%|\\n")
            os.write(1, b"windows line\\r")
            drained(1)
            os.write(1, b"\\nnext\\n\\r\\rsaving 1/2\\rsaving 2/2\\r")
        """
    )
    out, err, log = child(tmp_path, script)
    assert err == "\rLoading: 0%|\rLoading: 50%|\rLoading: 100%|\n"  # the terminal: every redraw
    assert out == "windows line\r\nnext\n\r\rsaving 1/2\rsaving 2/2\r"
    assert log == "Loading: 100%|\nwindows line\r\nnext\nsaving 2/2\r"


def test_a_line_a_carriage_return_ends_reaches_the_terminal_at_once(tmp_path):
    """Held for the log, not for the terminal: the child waits for its own stderr (a file here) to hold
    the bar before it writes anything more."""
    terminal = tmp_path / "stderr.txt"
    script = WAIT + textwrap.dedent(
        """
        with tee_output(Path(sys.argv[1])):
            os.write(2, b"bar 1/2\\r")
            until(lambda: Path(sys.argv[2]).read_bytes() == b"bar 1/2\\r", "the bar on the terminal")
        """
    )
    with open(terminal, "wb") as err:
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "log.txt"), str(terminal)],
                              stderr=err, timeout=60)  # fmt: skip
    assert done.returncode == 0, terminal.read_text()
    assert (tmp_path / "log.txt").read_bytes() == b"bar 1/2\r"  # the last state: kept at the end


def test_a_line_written_in_pieces_is_not_cut_by_the_other_streams_lines(tmp_path):
    """A line's first piece is read by its pump on its own (the pipe drained) before the other stream
    writes a whole line and its second piece follows: the log holds the other line, then this one whole."""
    script = WAIT + textwrap.dedent(
        """
        with tee_output(Path(sys.argv[1]), prefix="[c] "):
            os.write(1, b"part one, ")
            drained(1)
            os.write(2, b"a warning\\n")
            landed(b"a warning\\n")
            os.write(1, b"part two\\n")
        """
    )
    out, err, log = child(tmp_path, script)
    assert log.splitlines() == ["a warning", "part one, part two"]
    assert (out, err) == ("[c] part one, part two\n", "[c] a warning\n")


def test_python_text_reaches_the_descriptor_at_once_in_order_with_other_writers(tmp_path):
    """A write without its newline is not held back in Python: a child's (or C library's) line written
    after it follows it in the log."""
    script = WAIT + textwrap.dedent(
        """
        with tee_output(Path(sys.argv[1])):
            sys.stdout.write("partial, ")
            os.write(1, b"then a descriptor's line\\n")
        """
    )
    assert child(tmp_path, script)[2] == "partial, then a descriptor's line\n"


def test_text_that_cannot_be_encoded_is_replaced_not_raised(tmp_path):
    """A lone surrogate (from a file name read with surrogateescape, say) printed inside the block is
    written as '?', as a terminal's stream would, and does not end the cell."""
    script = WAIT + textwrap.dedent(
        """
        with tee_output(Path(sys.argv[1])):
            print("name: \\udcff")
        """
    )
    out, _, log = child(tmp_path, script)
    assert out == log == "name: ?\n"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd (Linux)")
def test_the_block_leaves_no_descriptor_open(tmp_path):
    """The log and the saved copies of fd 1 and 2 are closed once the pumps are done: a sweep runs its
    cells in one process, and each cell would otherwise keep three descriptors."""
    script = WAIT + textwrap.dedent(
        """
        before = sorted(os.listdir("/proc/self/fd"))
        for i in range(3):
            with tee_output(Path(sys.argv[1])):
                print(i)
        after = sorted(os.listdir("/proc/self/fd"))
        print(len(before), len(after), file=sys.stderr)
        """
    )
    _, err, log = child(tmp_path, script)
    opened, left = err.split()
    assert log == "0\n1\n2\n" and left == opened


def test_a_child_still_holding_the_pipe_is_waited_for_a_few_seconds_not_to_its_end(tmp_path):
    """A process the cell started that outlives it (a server left running, say) keeps the pipes open:
    the block waits JOIN_S for its last lines, for both pumps together (not JOIN_S for each in turn,
    nor a floor of its own per pump), then ends, and the cell's process can exit while the child still
    runs (the pumps are daemon threads). JOIN_S is set to 1 s here, so one wait of it and two differ by
    a second; timed inside the child script and against the child's own end (a file it writes), so a
    slow start on a loaded machine does not count."""
    done = tmp_path / "child-done"
    script = WAIT + textwrap.dedent(
        """
        import subprocess
        import pats.sweep.logs

        JOIN_S = pats.sweep.logs.JOIN_S = 1.0

        child = f"import time; from pathlib import Path; time.sleep({JOIN_S + 5}); Path({sys.argv[2]!r}).touch()"
        start = time.monotonic()
        with tee_output(Path(sys.argv[1])):
            subprocess.Popen([sys.executable, "-c", child])  # holds the block's fd 1 and 2
            print("early")
        print(f"{JOIN_S} {time.monotonic() - start:.1f}", file=sys.stderr)
        """
    )
    _, err, log = child(tmp_path, script, str(done))
    join_s, block_s = map(float, err.split())
    assert log == "early\n"
    assert join_s - 0.1 <= block_s < join_s + 0.8  # JOIN_S once, not twice, nor the child's JOIN_S + 5
    assert not done.exists()  # the script exited while its child still ran


def test_a_descriptor_that_cannot_be_copied_raises_its_own_error_and_gives_stdout_back(tmp_path):
    """Out of descriptors (EMFILE: a long sweep with a leak somewhere) when fd 2 is to be saved, fd 1
    already teed: the block raises that OSError, not an error of its own cleanup, and stdout is back
    where it was."""
    script = WAIT + textwrap.dedent(
        """
        copies = []
        real_dup = os.dup

        def dup(fd):
            copies.append(fd)
            if len(copies) == 2:
                raise OSError(24, "Too many open files")
            return real_dup(fd)

        os.dup = dup
        try:
            with tee_output(Path(sys.argv[1])):
                print("inside")
        except OSError as err:
            print(f"raised errno {err.errno}")
        """
    )
    out, err, log = child(tmp_path, script)
    assert (out, log) == ("raised errno 24\n", "")
