"""`python3 -m determined.launch.torch_distributed [OVERRIDES... --] (--trial module:Class | SCRIPT...)`:
Stratus's `stratus.launchers.torch_distributed`, which takes Determined's command line."""

import sys

from stratus.launchers.torch_distributed import main

if __name__ == "__main__":
    sys.exit(main())
