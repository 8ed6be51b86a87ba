"""The dead-letter queue: the watcher that answers what landed there FAILED, and that answer."""
