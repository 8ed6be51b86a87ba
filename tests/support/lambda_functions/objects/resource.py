"""AWS's S3Objects example names its module resource.py (Handler: resource.handler): the standard
library's `resource` must not hide it. Answers with the stock cfnresponse."""

import cfnresponse


def handler(event, context):
    key = event["ResourceProperties"].get("Key", "object")
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Module": __name__}, "s3-object-" + key)
