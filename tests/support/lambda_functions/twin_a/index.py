"""One of two inline functions whose Handler is index.handler, with a helper module of the same name as its twin's."""

import cfnresponse
import helpers


def handler(event, context):
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Twin": helpers.TWIN}, helpers.TWIN + "-1")
