"""`python -m embedded [--bind HOST:PORT]`: the whole panel on this machine, supervised (panel.py)."""

import sys

from embedded.panel import main

sys.exit(main())
