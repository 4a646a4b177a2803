"""RemotingCommand: one request or response of the remoting protocol, independent of bytes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from pynamesrv.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, SERVER_VERSION


class SerializeType(IntEnum):
    """High byte of the header-length word: how the header is encoded."""

    JSON = 0
    ROCKETMQ = 1


@dataclass(slots=True)
class RemotingCommand:
    """A decoded frame.

    ``language`` is kept as the name the peer sent (JSON) or the name of the byte (ROCKETMQ);
    an unknown language is kept verbatim because the server must accept and ignore it.
    ``ext_fields`` values are always strings, as Java's custom headers are.
    """

    code: int
    language: str = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON
    # CRC-32 of the body if the decoder already computed it (large bodies), else None.
    body_crc: int | None = None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def field(self, name: str) -> str | None:
        """The custom-header field ``name``, or None when absent (never enforced, like Java)."""
        ext = self.ext_fields
        return None if ext is None else ext.get(name)

    @classmethod
    def response_to(
        cls,
        request: RemotingCommand,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        version: int = SERVER_VERSION,
    ) -> RemotingCommand:
        """The answer to ``request``: opaque echoed, flag 1, the answering side's version.

        The serialize type of the request is echoed (4.9.4 behaviour); C++ and Node clients
        cannot read ROCKETMQ-typed answers, and they only ever send JSON.
        """
        return cls(
            code=code,
            language="JAVA",
            version=version,
            opaque=request.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields,
            body=body,
            serialize_type=request.serialize_type,
        )
