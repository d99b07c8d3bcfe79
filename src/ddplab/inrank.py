"""ddplab's own modules that run inside a user's rank without the user's script naming them: the boot
(sitecustomize), the sanitizer's wrappers (of DDP, load_state_dict, print...), the Flight Recorder's boot, the import
hook, the profiler's step hook. In a rank's traceback they stand between the user's line and torch's, and are never
where the user's code failed: both readers of tracebacks (launcher.stacks, explain.reading) skip them by this one
list, so that a new module of this kind is added here once."""

# a regular expression's alternatives, for what follows ".../ddplab/" in a frame's file name
MODULES = r"sanitize[\\/]|boot[\\/]|flight[\\/]|afterimport\.py$|perf[\\/]profhook\.py$"
