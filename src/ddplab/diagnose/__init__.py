"""Turn failures into fixes: the error-text rule table (rules), its matcher (explain), static checks of a training
script (lint), and the hang watchdog `ddplab launch` runs (watchdog). None of these import torch."""
