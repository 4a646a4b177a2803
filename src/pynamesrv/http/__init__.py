"""The name server's HTTP side: /metrics, /healthz, /rocketmq/nsaddr, a JSON API, status page.

It runs on the name server's own event loop and reads the live tables directly (no copies, no
locks), so everything it shows is exactly what the remoting side answers at that moment.
"""

from pynamesrv.http.app import HttpServer

__all__ = ["HttpServer"]
