"""Every SQL statement the engine runs, one module per table or queue."""
