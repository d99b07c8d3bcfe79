"""Turn failures into fixes: the error-text rule table (rules), its matcher (explain), static checks of a training
script (lint). Knowledge only: no processes, no torch; the launcher uses it to name a root cause."""
