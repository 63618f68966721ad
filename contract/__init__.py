"""The contract between Stratus's sides, declared once: the data that crosses from the control plane
(`chalicelib/`) to the compute side (`harness/`, `launchers/`) and the CLI (`det/`).

Standard library only, so every side may import it (the launchers run in a trial's image, which need not
have httpx or pydantic), and `tests/contract` checks both ends against it.

    stratus.contract.errors    the API's error body and the package's errors
    stratus.contract.http      the compute side's one HTTP session: one retry policy, presigned transfers
    stratus.contract.transport how a request reaches a server: the network (connections kept open; urllib
                       through a proxy), or in memory for tests
    stratus.contract.env       the trial's environment: names, and a typed ``to_env`` / ``from_env``
    stratus.contract.launch    the launch spec an agent receives
    stratus.contract.context_archive  the context archive's members and bounds, checked on both sides
    stratus.contract.messages  the queue messages (scheduler, launch, trial events)
    stratus.contract.actions   the searcher's actions as a trial sees them
    stratus.contract.nni       telling an NNI experiment config from a Determined one
    stratus.contract.entrypoint  Determined's legacy ``model_def:TrialClass`` entrypoint rule
    stratus.contract.local_events  the local test mode's event log, written by the harness, read by ``det``
    stratus.contract.metric_groups  the groups a trial reports metrics under, and the rule for their names
    stratus.contract.owner     the header the CLI names its user in (an experiment's owner, a label)
    stratus.contract.adaptdl   AdaptDL elastic trials: the replicas' variables, the hints, the checkpoint's shape
    stratus.contract.log_levels  a trial log line's level, as Determined reads it (``det trial logs --level``)
    stratus.contract.tags      the user's tags (``det deploy aws up --add-tag``): AWS's rules, ``STRATUS_TAGS``
    stratus.contract.versions  the code's version, the header every caller names its own in, and how a CLI's
                       or an agent's version stands against the API's (which is behind, the fix)
"""
