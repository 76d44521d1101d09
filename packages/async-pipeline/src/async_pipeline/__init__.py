"""The asynchronous machinery on Ray (broker, ledger, staleness, fleet, actors, step transport).

Nothing is imported here: each module is imported by name, so a light one (the ledger, the staleness bound) does not
pull in torch or ray.
"""
