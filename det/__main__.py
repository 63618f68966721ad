from __future__ import annotations

import sys

from det.cli import main

sys.exit(main())
