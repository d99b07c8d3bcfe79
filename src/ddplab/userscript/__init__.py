"""A user's own training script under `ddplab launch`: the plan before it starts (plan) and what its failure or hang
means afterwards (analysis). Running it is the launcher's job (ddplab.launcher.script)."""
