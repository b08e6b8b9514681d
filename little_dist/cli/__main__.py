from __future__ import annotations

import sys

from little_dist.cli import main

sys.exit(main())
