"""The README's shell blocks, run as a reader runs them, in a copy of the checkout.

``python tests/readme_blocks.py`` lists the blocks it runs and those it skips (with why);
``python tests/readme_blocks.py run WORKDIR`` runs them (tests/e2e/test_readme.py does, in a
network namespace of its own: the default ports are then free, and a block that needs the
network fails instead of quietly using it).

The rules, which the README is written to:

* A block is a fenced ``sh`` block. One preceded by ``<!-- readme-test: skip (WHY) -->`` is
  skipped: one that needs a cluster, the network, or a quarter of an hour.
* Each command (a line; ``\\`` continues it) runs in its own ``bash``, in the root of a copy of
  the checkout whose ``.venv`` already holds what `make run`, `make test` and the extras
  install (``checkout_copy.overlay_venv``): ``make`` finds nothing to install. ``HOME`` is a
  new directory; ``PATH`` holds no venv, so only what the README spells out is found.
* A command must exit with status 0, except a server (``make run``, ``pynamesrv serve``
  without ``-p``), which must serve: listen on a TCP port and keep running. A server is
  stopped with Ctrl-C (SIGINT) before the next command starts, except when that command is
  a ``pynamesrv stop``, which must stop it (exit status 0) itself.
* Processes a command leaves in the background (a daemon) may run until a later block
  stops them; none may be left when the last block has run (once those that were ending,
  such as a Spark job's JVM after its driver, have ended).
* Nothing a command prints may be a Python traceback or warning (``FutureWarning: ...``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkout_copy import (
    clean_env,
    copy_checkout,
    copy_compiled_loops,
    overlay_venv,
)
from waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((?P<why>[^)]*)\)\s*-->")
STOP = re.compile(r"(?:^|\s|/)pynamesrv\s+stop\b")
SERVER = re.compile(
    r"^make\s+run\b|(?:^|\s|/)pynamesrv\s+serve\b(?!.*\s(?:-p|--printConfigItem)\b)"
)
# Python's warning lines ("...py:41: FutureWarning: ...") and tracebacks, not log levels.
PYTHON_NOISE = re.compile(r"\b[A-Z]\w*Warning: |Traceback \(most recent call last\)")
GUARD_S = 600.0  # one command (a pipeline run on a busy machine): against hangs only
STOP_GUARD_S = 60.0
T = TypeVar("T")
STAMPS = (".installed-run", ".installed-test", ".installed-pipeline", ".installed-tls")


@dataclass
class Block:
    line: int  # of the opening fence
    commands: list[str]
    skip: str | None = None

    @property
    def title(self) -> str:
        """Its first command without the comment, shortened."""
        first = (self.commands[0] if self.commands else "").split("  #")[0].rstrip()
        more = f" (+{len(self.commands) - 1} more)" if len(self.commands) > 1 else ""
        return (first if len(first) <= 80 else first[:77] + "...") + more


def parse(text: str) -> list[Block]:
    """The ``sh`` blocks of ``text`` with their commands and skip markers."""
    blocks: list[Block] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        if lines[number].strip() != "```sh":
            number += 1
            continue
        start = number
        body: list[str] = []
        number += 1
        while lines[number].strip() != "```":
            body.append(lines[number])
            number += 1
        previous = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        marker = SKIP.search(previous)
        blocks.append(Block(start + 1, commands(body), marker["why"] if marker else None))
        number += 1
    return blocks


def commands(body: list[str]) -> list[str]:
    """Logical lines: continuations joined, comment-only and blank lines dropped."""
    found: list[str] = []
    pending = ""
    for raw in body:
        line = raw.rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        found.append(" ".join((pending + line).split()) if pending else line.strip())
        pending = ""
    return found


def listing(blocks: list[Block], outcomes: dict[int, list[str]] | None = None) -> str:
    """One line per block: run or skipped (and why); what each command did, once run."""
    out = []
    for block in blocks:
        if block.skip is not None:
            out.append(f"skipped  README.md:{block.line}  {block.title}  ({block.skip})")
            continue
        done = (outcomes or {}).get(block.line)
        state = "runs   " if outcomes is None else ("ran    " if done else "not run")
        out.append(f"{state}  README.md:{block.line}  {block.title}")
        out += [f"           {line}" for line in done or []]
    return "\n".join(out)


# ------------------------------------------------------------------------ processes


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":  # pgrp; zombies are gone
                pids.append(int(entry))
    return pids


def _listening() -> dict[int, int]:
    """Socket inode -> port of every listening TCP socket (IPv4 and IPv6)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] == "0A":  # LISTEN
                found[int(cols[9])] = int(cols[1].rsplit(":", 1)[1], 16)
    return found


def _ports_of(pgid: int) -> set[int]:
    """Ports the processes of a group listen on."""
    listening = _listening()
    ports = set()
    for pid in _group_pids(pgid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                port = listening.get(int(target[8:-1]))
                if port is not None:
                    ports.add(port)
    return ports


def _wait(condition: Callable[[], T], what: str, timeout_s: float) -> T:
    """``waiting.wait_until``, its guard reported as this command's failure."""
    try:
        return wait_until(condition, what, timeout_s)
    except AssertionError as exc:
        raise CommandFailed(str(exc)) from None


class CommandFailed(Exception):
    pass


@dataclass
class Command:
    text: str
    log: Path
    proc: subprocess.Popen[bytes]
    ports: set[int] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)

    def seconds(self) -> float:
        """Since it started (shown, never asserted: the machine's speed varies 2x)."""
        return time.monotonic() - self.started

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def check_output(self) -> None:
        noise = PYTHON_NOISE.search(self.output())
        if noise:
            raise CommandFailed(f"printed a Python traceback or warning ({noise[0].strip()})")

    def interrupt(self) -> None:
        """Ctrl-C, as in the terminal: SIGINT to the foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        _wait(lambda: self.proc.poll() is not None and not _group_pids(self.proc.pid),
              f"{self.text!r} ending after Ctrl-C", STOP_GUARD_S)  # fmt: skip


@dataclass
class Runner:
    checkout: Path
    env: dict[str, str]
    logs: Path
    groups: dict[int, str] = field(default_factory=dict)  # of the commands that exited
    count: int = 0

    def start(self, text: str) -> Command:
        self.count += 1
        log = self.logs / f"{self.count:02d}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["bash", "-o", "pipefail", "-c", text], cwd=self.checkout, env=self.env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,  # a group of its own, as a terminal's foreground job
            )  # fmt: skip
        return Command(text, log, proc)

    def settle(self, command: Command) -> str:
        """Until the command exits or (a server) serves; what it did."""
        server = SERVER.search(command.text.split("  #")[0]) is not None

        def settled() -> str | None:
            if command.proc.poll() is not None:
                return "exited"
            if server:
                command.ports = _ports_of(command.proc.pid)
            return "serves" if command.ports else None

        state = str(_wait(settled, f"{command.text!r} exiting or serving", GUARD_S))
        if server and state == "exited":
            raise CommandFailed(f"a server that exited (status {command.proc.returncode})")
        return state

    def run_block(self, block: Block) -> Iterator[str]:
        """Run a block's commands by the rules; one line per command saying what it did."""
        server: Command | None = None
        for text in block.commands:
            if server is not None and not STOP.search(text):
                server.interrupt()
                server.check_output()
                server = None
            command = self.start(text)
            try:
                state = self.settle(command)
                if state == "exited":
                    if command.proc.returncode != 0:
                        raise CommandFailed(f"exit status {command.proc.returncode}")
                    command.check_output()
                    if server is not None:  # the stop it ran must have ended the server
                        _wait(lambda s=server: s.proc.poll() is not None,
                              f"{server.text!r} exiting after the stop", STOP_GUARD_S)  # fmt: skip
                        if server.proc.returncode != 0:
                            raise CommandFailed(f"stopped server: status {server.proc.returncode}")
                        server.check_output()
                        server = None
                        yield f"ok: {text}  (stopped the server)"
                    else:
                        self.groups[command.proc.pid] = text
                        yield f"ok: {text}  ({command.seconds():.0f} s)"
                else:
                    if server is not None:
                        raise CommandFailed(f"a stop that serves? ({server.text!r} still runs)")
                    ports = ", ".join(str(p) for p in sorted(command.ports))
                    yield f"ok: {text}  (served on {ports} after {command.seconds():.0f} s)"
                    server = command
            except CommandFailed as exc:
                if command.proc.poll() is None:
                    os.killpg(command.proc.pid, signal.SIGKILL)
                    command.proc.wait()
                raise CommandFailed(f"{text}\n  {exc}\n  output:\n{_tail(command)}") from None
        if server is not None:
            server.interrupt()
            server.check_output()
            yield f"   Ctrl-C stopped: {server.text}"

    def leftovers(self) -> list[str]:
        """Commands whose processes still run, once those that were ending have ended
        (they are killed: nothing outlives the run)."""
        try:
            _wait(lambda: not any(map(_group_pids, self.groups)), "the processes left by the "
                  "commands ending", STOP_GUARD_S)  # fmt: skip
            return []
        except CommandFailed:
            alive = [pgid for pgid in self.groups if _group_pids(pgid)]
            for pgid in alive:
                os.killpg(pgid, signal.SIGKILL)
            return [self.groups[pgid] for pgid in alive]


def _tail(command: Command, lines: int = 40) -> str:
    return "\n".join("    | " + line for line in command.output().splitlines()[-lines:])


# ------------------------------------------------------------------------ the run


def prepare(workdir: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the checkout with its overlay .venv, stamps as after `make test`, a HOME."""
    checkout = copy_checkout(workdir / "checkout")
    copy_compiled_loops(checkout)
    venv = overlay_venv(checkout / ".venv", checkout_src=checkout / "src")
    for stamp in STAMPS:  # newer than every file copied: make installs nothing
        (venv / stamp).touch()
    home = workdir / "home"
    home.mkdir()
    return checkout, clean_env(home)


def run(workdir: Path) -> int:
    blocks = parse(README.read_text())
    checkout, env = prepare(workdir)
    logs = workdir / "logs"
    logs.mkdir()
    runner = Runner(checkout, env, logs)
    outcomes: dict[int, list[str]] = {}
    failure = None
    for block in blocks:
        if block.skip is not None:
            continue
        done = outcomes.setdefault(block.line, [])
        try:
            for line in runner.run_block(block):
                done.append(line)
        except CommandFailed as exc:
            failure = f"README.md:{block.line}: {exc}"
            break
    left = runner.leftovers()
    if failure is None and left:
        failure = f"processes left running after the last block, killed: {left}"
    print(listing(blocks, outcomes))
    if failure is not None:
        print(f"\nFAILED {failure}")
        return 1
    print("\nOK: every block above that ran did as the README says")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"] and len(argv) == 2:
        return run(Path(argv[1]))
    if not argv:
        print(listing(parse(README.read_text())))
        return 0
    print("usage: readme_blocks.py [run WORKDIR]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
