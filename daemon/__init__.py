"""cfn-sns-provider: serve CloudFormation custom resources from an SQS queue subscribed to an SNS topic."""
__version__ = "0.1.0"
