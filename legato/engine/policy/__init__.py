"""Pure policy the loops and the in-memory simulator share: no I/O, no clock."""
