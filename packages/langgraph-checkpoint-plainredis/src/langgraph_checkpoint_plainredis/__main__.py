"""`python -m langgraph_checkpoint_plainredis`: the `plainredis` command."""

import sys

from ._cli import main

sys.exit(main())
