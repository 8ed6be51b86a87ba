"""Modules a `lambda:` function's interpreter finds last on its path, as Lambda provides them to inline code.

This folder (not the package) is appended to the function's sys.path by
cfn_provider.functions.runtime: `import cfnresponse` finds the function's own copy first, when it
ships one, and this folder's otherwise. Nothing here is importable in the daemon's own interpreter
under those names.
"""
