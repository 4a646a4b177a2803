"""What the access check costs a request, next to the HMAC it cannot avoid.

For a signed PUT_KV_CONFIG (a few short fields), a signed route query and a signed
REGISTER_BROKER with a 1 MiB body, the time of ``AccessControl.check`` (field order, content,
HmacSHA1, constant-time compare, account and address look-up) next to the reference: one
``hmac.digest`` of the same content, the floor any verifier pays. Also the check of a request
that needs nothing (a route query with reads open), the cost every request pays when an
accounts file is configured.

    .venv/bin/python bench/acl_check.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import hmac
import os
import statistics
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.acl import AccessControl
from pynamesrv.remoting.acl_sign import Credentials, sign, signed_content
from pynamesrv.remoting.command import RemotingCommand

CREDENTIALS = Credentials("rocketmq2", "12345678")
CALLER = "10.0.0.7:51234"


def per_call_us(job: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(job, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        accounts = Path(tmp) / "plain_acl.yml"
        accounts.write_text(
            "accounts:\n"
            "  - {accessKey: rocketmq2, secretKey: 12345678, admin: true,"
            " whiteRemoteAddress: '10.0.0.*'}\n"
        )
        accounts.chmod(0o600)
        strict = AccessControl(accounts, registration_required=True, read_required=True)
        relaxed = AccessControl(accounts)
        cases = [
            ("signed PUT_KV_CONFIG", requests.put_kv_config("NS", "k", "v")),
            ("signed route query", requests.get_routeinfo_by_topic("TopicA")),
            (
                "signed REGISTER_BROKER, 1 MiB body",
                # Random bytes: the check hashes the body, it never decodes it.
                RemotingCommand(
                    code=103,
                    ext_fields={"brokerName": "broker-a", "brokerAddr": "10.0.0.7:10911",
                                "brokerId": "0", "clusterName": "DefaultCluster",
                                "bodyCrc32": "1", "compressed": "false"},
                    body=os.urandom(1 << 20),
                ),
            ),
        ]  # fmt: skip
        print(f"{'request':<36} {'check':>12} {'reference':>12}   (µs per request, best of "
              f"{args.repeat})")  # fmt: skip
        for name, unsigned in cases:
            request = sign(unsigned, CREDENTIALS)
            assert strict.check(request, CALLER) == "rocketmq2"
            content = signed_content(request.ext_fields, request.body)
            number = 200 if request.body else 20_000
            ours = per_call_us(lambda r=request: strict.check(r, CALLER), number, args.repeat)
            floor = per_call_us(
                lambda c=content: hmac.digest(b"12345678", c, "sha1"), number, args.repeat
            )
            print(f"{name:<36} {ours:>12.1f} {floor:>12.1f}")
        open_query = requests.get_routeinfo_by_topic("TopicA")
        samples = [
            per_call_us(lambda: relaxed.check(open_query, CALLER), 200_000, 1)
            for _ in range(args.repeat)
        ]
        print(f"{'route query, reads open':<36} {statistics.median(samples):>12.2f} {'-':>12}")


if __name__ == "__main__":
    main()
