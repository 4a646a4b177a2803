"""pynamesrv: a wire-compatible Apache RocketMQ NameServer in Python."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pynamesrv")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"
