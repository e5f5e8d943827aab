"""An S3 server that enforces IAM policies: moto's server (moto 5.2.5) in its own process.

Used by tests/tenancy/test_store.py to play two tenants' keys against each other. moto checks
every S3 request's SigV4 signature and the caller's IAM policies once its "no-auth" allowance is
spent (moto/core/authorization.py, ``ActionAuthenticatorMixin``: ``INITIAL_NO_AUTH_ACTION_COUNT``,
reset over HTTP by ``POST /moto-api/reset-auth``, as moto's ``set_initial_no_auth_action_count``
does in server mode). A separate process, because that allowance is a module global: the session's
shared moto server (tests/conftest.py ``s3_endpoint``) keeps accepting any key.

One emulation, because moto 5.2.5 does not evaluate policy conditions on S3 requests
(moto/iam/access_control.py ``check_action_permitted`` passes no request values, and
moto/iam/policy_conditions.py knows only ``StringEquals``, ignoring other operators): the
``s3:prefix`` of ``s3:ListBucket`` is evaluated here as AWS documents it (IAM User Guide,
"Condition operators": ``StringLike`` with ``*``/``?`` wildcards, case-sensitive; a key absent from
the request does not match). Without it every prefix-limited list grant would list the whole
bucket. A failed condition on an Allow statement reads DENIED in moto (NEUTRAL in AWS): the same
outcome for the policies tested, whose only ListBucket grant carries the condition.

Run as ``python -m tests.support.iam_s3_server PORT`` from the repository root.
"""

from __future__ import annotations

import re
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit


def _string_like(pattern: str, value: str) -> bool:
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def _condition_holds(condition: dict[str, Any], values: dict[str, str]) -> bool:
    """AWS's evaluation of a Condition block over the request's ``values``: every operator and
    key must match one of its values; an absent key or an operator not emulated does not."""
    for operator, keys in condition.items():
        for key, expected in keys.items():
            actual = values.get(key)
            if actual is None or operator not in ("StringLike", "StringEquals"):
                return False
            options = [expected] if isinstance(expected, str) else list(expected)
            if operator == "StringEquals" and actual not in options:
                return False
            if operator == "StringLike" and not any(_string_like(p, actual) for p in options):
                return False
    return True


def install_prefix_conditions() -> None:
    """Make moto's S3 authorisation evaluate ``s3:prefix`` conditions (module docstring)."""
    from moto.iam import access_control

    def check_conditions(self: Any, values: dict[str, str] | None) -> bool:
        condition = self._statement.get("Condition")
        return not condition or _condition_holds(condition, values or {})

    def check_action_permitted(self: Any, resource: str) -> None:
        query = parse_qs(urlsplit(self._path).query, keep_blank_values=True)
        values = {"s3:prefix": query["prefix"][0]} if "prefix" in query else {}
        permitted = False
        for policy in self._access_key.collect_policies():
            result = access_control.IAMPolicy(policy).is_action_permitted(
                self._action, resource, None, values
            )
            if result == access_control.PermissionResult.DENIED:
                self._raise_access_denied()
            permitted = permitted or result == access_control.PermissionResult.PERMITTED
        if not permitted:
            self._raise_access_denied()

    setattr(access_control.IAMPolicyStatement, "_check_conditions", check_conditions)  # noqa: B010
    setattr(access_control.S3IAMRequest, "check_action_permitted", check_action_permitted)  # noqa: B010


def main(port: int) -> None:
    install_prefix_conditions()
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]))
