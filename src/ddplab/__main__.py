import sys

from ddplab.cli import main

sys.exit(main())
