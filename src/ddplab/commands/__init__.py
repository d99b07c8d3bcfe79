"""One module per subcommand: add_parser(subparsers) registers it, run(args) -> exit code does it."""
