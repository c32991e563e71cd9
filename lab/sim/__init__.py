"""Deterministic simulation (SPEC §15, docs/simulation.md): the real node code on one trio loop over a
simulated environment, one seed one history."""
