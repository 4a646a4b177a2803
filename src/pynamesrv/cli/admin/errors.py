"""How an admin command fails: one-line messages and the exit codes scripts branch on."""

from __future__ import annotations

from typing import Any, Final

from pynamesrv.remoting.codes import RequestCode, ResponseCode

# Exit codes (documented in the group's help; scripts depend on them, never renumber).
EXIT_OK: Final = 0
EXIT_ERROR_ANSWER: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNREACHABLE: Final = 3
EXIT_TIMEOUT: Final = 4
EXIT_DIFFERENT: Final = 5
EXIT_NOTHING_CHANGED: Final = 6


class AdminFailure(Exception):
    """A failure that ends the command with a one-line message and a documented exit code."""

    exit_code = EXIT_UNREACHABLE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_json(self) -> dict[str, Any]:
        """The failure as ``--json`` prints it."""
        return {"error": self.message, "exitCode": self.exit_code}


class Unreachable(AdminFailure):
    """Connection refused, reset or closed: the server is down or the address is wrong."""

    exit_code = EXIT_UNREACHABLE


class NoAnswer(AdminFailure):
    """Connected (or tried to) but nothing came back in time: a hung or overloaded server."""

    exit_code = EXIT_TIMEOUT


class NothingChanged(AdminFailure):
    """The server accepted a write that changed nothing: the broker, topic or key it names
    is not there (a typo, or a name server that never heard of it). Java answers SUCCESS
    to these, so a script could not tell; exiting non-zero lets it."""

    exit_code = EXIT_NOTHING_CHANGED

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data = dict(data or {})  # what the answer said anyway (a count of 0)


class ErrorAnswer(AdminFailure):
    """The server answered with a non-success code; the code and remark are the diagnosis."""

    exit_code = EXIT_ERROR_ANSWER

    def __init__(self, addr: str, code: int, remark: str | None) -> None:
        self.addr = addr
        self.code = code
        self.remark = remark
        # Remarks may span lines (TOPIC_NOT_EXIST adds a FAQ link); errors stay one line.
        flat = " ".join((remark or "").split())
        super().__init__(f"{addr} answered {response_name(code)} ({code}): {flat}")

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "namesrv": self.addr,
            "code": self.code,
            "codeName": response_name(self.code),
            "remark": self.remark,
        }


def response_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "UNKNOWN"


def request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)
