"""`python3 -m determined.launch.horovod [OVERRIDES... --] (--trial module:Class | SCRIPT...)`:
Stratus's `stratus.launchers.horovod`, which takes Determined's command line."""

import sys

from stratus.launchers.horovod import main

if __name__ == "__main__":
    sys.exit(main())
