"""Background work: the scheduler and the one-step functions it runs."""
