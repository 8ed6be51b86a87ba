"""What handler authors use: the declarative SDK and the adapter that runs Lambda functions unchanged."""
