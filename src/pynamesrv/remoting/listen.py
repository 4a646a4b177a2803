"""Binding a listening socket before its server exists.

``pynamesrv serve`` binds every port before it writes anything or logs boot success, but the
HTTP server's code (aiohttp) is imported only after the remoting port accepts. So the HTTP
port is bound here, as ``loop.create_server`` would bind it, and handed to the server later
(``create_server(sock=...)``).
"""

from __future__ import annotations

import socket


def bind_listeners(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening, non-blocking sockets on every address ``host`` names (all interfaces for
    "" as asyncio does), with SO_REUSEADDR; an IPv6 socket is IPv6 only so that a second one
    can take the IPv4 address. Raises the first ``OSError`` (nothing stays bound then)."""
    infos = socket.getaddrinfo(
        host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        seen: set[tuple[int, object]] = set()
        for family, kind, proto, _, found in infos:
            # The first address chose the port when it was 0: the others take the same one.
            address = (found[0], port, *found[2:])
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
            port = sock.getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets
