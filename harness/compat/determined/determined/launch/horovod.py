"""`python3 -m determined.launch.horovod [OVERRIDES... --] (--trial module:Class | SCRIPT...)`:
Stratus's `launchers.horovod`, which takes Determined's command line."""

import sys

from launchers.horovod import main

if __name__ == "__main__":
    sys.exit(main())
