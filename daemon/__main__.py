"""`python -m cfn_provider`: the command line, as the console script runs it.

`-m` puts the working directory first on sys.path; it is taken off again, so that handler modules
follow the one rule of cfn_provider.pipeline.handler_path (installed packages, PYTHONPATH and the
--handler-path folders) whichever way the daemon is started.
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()) and not sys.flags.safe_path:
    del sys.path[0]

from .cli import main  # noqa: E402 - after the path is settled

main()
