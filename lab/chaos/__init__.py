"""``isrsim chaos``'s parts: ``schedule`` (pure: the seeded faults), ``nemesis`` (applies and ends them),
``view`` (the status line), ``run`` (workload, nemesis, convergence, report)."""
