"""Long-running resources: requests whose action goes on after the message that
brought it (the poll contract's progress, the steps that resume it, the scheduler that runs them)."""
