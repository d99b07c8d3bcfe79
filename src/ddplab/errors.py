"""The one exception type a user ever sees from ddplab: a single line with the problem and its fix."""


class DdplabError(Exception):
    """What is wrong and how to fix it, in one line. `exit_code` follows the CLI convention (2 = bad input)."""

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
