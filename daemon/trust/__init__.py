"""The trust boundary: SNS signatures, ResponseURL rules and redaction, secrets at rest."""
