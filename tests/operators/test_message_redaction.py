"""What the operator shows of a refused spec holds no credential: status condition messages
(read by everyone who can get the object) and the admission webhook's messages pass through
:func:`sarl.spec.secrets.redact_text`."""

from __future__ import annotations

from sarl_operator.admission import image_violations
from sarl_operator.status import condition, failed_status

PLANTED = "Zq9xW2vK7planted"


def test_condition_and_failed_status_messages_are_redacted() -> None:
    message = f"tracking: alice:{PLANTED}@mlflow:5000 refused; --api-key={PLANTED}"
    assert PLANTED not in str(condition("Ready", "False", "InvalidSpec", message))
    assert PLANTED not in str(failed_status(message, 1, "now"))
    assert "***@mlflow:5000" in condition("Ready", "False", "X", message)["message"]


def test_admission_messages_do_not_echo_credentials_in_an_image() -> None:
    body = {
        "kind": "Experiment",
        "spec": {"resources": {"image": f"alice:{PLANTED}@evil.io/x:1"}},
    }
    found = image_violations(body, ["ghcr.io/sarl-dev"])
    assert found and "spec.resources.image" in found[0]
    assert PLANTED not in "; ".join(found)
