"""`python -m api.cli.command`: the `compactd` command."""

import sys

from api.cli.command import main

sys.exit(main())
