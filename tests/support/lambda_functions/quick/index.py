"""Like AWS's getfromjson example (ServiceTimeout 1): read a value out of a JSON document, at once."""

import json

import cfnresponse


def handler(event, context):
    props = event["ResourceProperties"]
    try:
        value = json.loads(props["Json"])[props["Key"]]
    except (KeyError, ValueError) as exc:
        cfnresponse.send(event, context, cfnresponse.FAILED, {}, reason=f"cannot read it: {exc}")
        return
    cfnresponse.send(
        event, context, cfnresponse.SUCCESS, {"Value": value, "RemainingMs": context.get_remaining_time_in_millis()}
    )
