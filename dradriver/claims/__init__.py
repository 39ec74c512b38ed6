"""Preparing and unpreparing claims: resolution, planning, the call budget, fetching,
the lifecycle of a claim's devices, start-up reconciliation."""
