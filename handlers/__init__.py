"""Built-in handler modules, one per ResourceType (registered as `cfn_provider.handlers` entry points)."""
