"""The composition gate: a reference runtime crashed by SIGKILL at every transition of a
compound workload, an external side-effect ledger, and the rig that checks recovery after every restart.

Nothing here imports Django: the runtime is started as a child process many hundred times per run, and
its start-up cost is the rig's cost.
"""
