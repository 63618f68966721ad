"""`python3 -m determined.launch.wrap_rank [--no-redirect-stdio] RANK [--] SCRIPT...`: Stratus's
`stratus.launchers.wrap_rank` (every output line tagged ``[rank=N]``, as the trial logs show ranks).
``--no-redirect-stdio`` is accepted and has nothing to do: the lines always go to this process's
stdout and stderr."""

import sys

from stratus.launchers.wrap_rank import main

if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[1:] if args[:1] == ["--no-redirect-stdio"] else args))
