"""A check for the contract test: the only server error is the one the request asked for."""

import schemathesis

OUTAGE_SOURCE = "tok_processorOutage"


@schemathesis.check
def server_errors_only_by_design(ctx, response, case):
    """A 5xx only for a charge on the outage test source, and only `processor_unavailable`."""
    if response.status_code < 500:
        return None
    body = case.body if isinstance(case.body, dict) else {}
    asked = (
        case.method.upper() == "POST"
        and case.path == "/v1/charges"
        and body.get("source") == OUTAGE_SOURCE
    )
    try:
        code = response.json().get("code")
    except Exception:  # not JSON: not the designed answer either
        code = None
    if not (asked and response.status_code == 503 and code == "processor_unavailable"):
        raise AssertionError(
            f"server error {response.status_code} (code {code!r}) for a request that did not "
            f"ask for the simulated processor outage"
        )
    return None
