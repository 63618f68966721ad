"""`python3 -m determined.launch.deepspeed [OVERRIDES... --] (--trial module:Class | SCRIPT...)`:
Stratus's `stratus.launchers.deepspeed`, which takes Determined's command line."""

import sys

from stratus.launchers.deepspeed import main

if __name__ == "__main__":
    sys.exit(main())
