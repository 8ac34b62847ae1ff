"""`python -m initmem.cli`: the `initmem` command without its script on PATH."""

import sys

from initmem.cli.commands import main

sys.exit(main())
