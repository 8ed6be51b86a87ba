"""The Lambda idiom: the root logger's level from LOG_LEVEL, set at import; reads its own GREETING."""

import logging
import os

import cfnresponse

logger = logging.getLogger()
logger.setLevel(os.environ.get("LOG_LEVEL", "WARNING"))


def handler(event, context):
    logger.debug("debug from the function")
    logger.info("info from the function: %s", event["RequestType"])
    cfnresponse.send(event, context, cfnresponse.SUCCESS, {"Greeting": os.environ.get("GREETING")}, "loud-1")
