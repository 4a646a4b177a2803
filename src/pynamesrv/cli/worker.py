"""A worker process of ``serve --workers N`` (``python -m pynamesrv.cli.worker FD LEVEL
FORMAT [ACKS_FD]``): started by the writer (``namesrv.workers``), never by hand. ``FD`` is its
end of the writer's socketpair, ``ACKS_FD`` of the one it acknowledges applied batches on; it
logs to standard error at the writer's level and format."""

from __future__ import annotations

import asyncio
import sys

from pynamesrv.cli import logs
from pynamesrv.cli.serve import install_event_loop_policy
from pynamesrv.namesrv.heap import pin_malloc_thresholds
from pynamesrv.namesrv.worker import serve_worker


def main(argv: list[str]) -> None:
    fd, level, log_format = int(argv[0]), argv[1], argv[2]
    acks_fd = int(argv[3]) if len(argv) > 3 else None
    logs.configure(log_file="", max_bytes=0, backups=0, log_format=log_format, level=level)
    install_event_loop_policy()
    pin_malloc_thresholds()
    asyncio.run(serve_worker(fd, acks_fd))


if __name__ == "__main__":
    main(sys.argv[1:])
