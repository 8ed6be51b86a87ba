"""Local tools: the embedded AWS emulator, `demo`, and `simulate` (a CloudFormation stand-in)."""
