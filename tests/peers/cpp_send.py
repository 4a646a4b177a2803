"""Send one message with rocketmq-client-cpp (PyPI ``rocketmq`` 0.4.4) and print the result.

Run as a script in its own process, never imported into pytest: ``librocketmq.so`` is native
code that can crash or hang (it starts threads that do not always stop on shutdown), and a
loaded copy keeps threads and log files open for the life of the process.

    python cpp_send.py --namesrv 127.0.0.1:9876 --topic T --body hello --group G
    python cpp_send.py --namesrv-domain http://127.0.0.1:8080/nsaddr ...
    python cpp_send.py --namesrv ... --topic A --topic B ...   # B after a line on stdin

Prints one JSON line per send on stdout: ``{"ok": true, "topic": ..., "status": "OK",
"msg_id": ..., "offset": ...}``, or ``{"ok": false, "error": ...}``; exit code 0 when every
send got SEND_OK, 1 on a failed send, 2 on the hard timeout. The C++ client writes its logs
to ``$HOME/logs/rocketmq-cpp/``: callers point HOME at a scratch directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any

EXIT_OK = 0
EXIT_SEND_FAILED = 1
EXIT_HARD_TIMEOUT = 2


def _emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def _arm_hard_timeout(seconds: float) -> None:
    """Leave with EXIT_HARD_TIMEOUT whatever the native library is doing (os._exit skips it)."""

    def fire() -> None:
        _emit({"ok": False, "error": f"hard timeout after {seconds} s"})
        os._exit(EXIT_HARD_TIMEOUT)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--namesrv", help="name server address list, host:port[;host:port]")
    where.add_argument("--namesrv-domain", help="URL the client fetches the name server list from")
    parser.add_argument(
        "--topic",
        required=True,
        action="append",
        help="repeatable: one message per topic, each after the first once a line arrives "
        "on stdin (the same producer, e.g. across a name-server restart)",
    )
    parser.add_argument("--body", required=True, help="message body (UTF-8 text, no NUL)")
    parser.add_argument("--group", required=True, help="producer group")
    parser.add_argument("--tags", default="TagCpp")
    parser.add_argument("--keys", default="")
    parser.add_argument("--send-timeout-ms", type=int, default=5000)
    parser.add_argument("--hard-timeout", type=float, default=30.0, help="seconds")
    parser.add_argument(
        "--no-shutdown",
        action="store_true",
        help="skip producer.shutdown() (the library's shutdown can be slow)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _arm_hard_timeout(args.hard_timeout)
    # Imported here, after the watchdog: loading the library is part of what may fail.
    from rocketmq.client import Message, Producer, SendStatus

    producer = Producer(args.group, timeout=args.send_timeout_ms)
    if args.namesrv_domain:
        producer.set_namesrv_domain(args.namesrv_domain)
    else:
        producer.set_namesrv_addr(args.namesrv)
    code = EXIT_OK
    try:
        producer.start()
        for index, topic in enumerate(args.topic):
            if index:  # the next topic after a line on stdin: the caller's cue
                sys.stdin.readline()
            msg = Message(topic)
            if args.tags:
                msg.set_tags(args.tags)
            if args.keys:
                msg.set_keys(args.keys)
            msg.set_body(args.body)
            result = producer.send_sync(msg)
            ok = result.status == SendStatus.OK
            _emit(
                {
                    "ok": ok,
                    "topic": topic,
                    "status": result.status.name,
                    "msg_id": result.msg_id,
                    "offset": result.offset,
                }
            )
            if not ok:
                code = EXIT_SEND_FAILED
                break
    except Exception as exc:  # the binding raises its own exception types
        _emit({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        code = EXIT_SEND_FAILED
    if not args.no_shutdown:
        producer.shutdown()
    # Skip interpreter teardown: the binding's __del__ methods call into the library again.
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
