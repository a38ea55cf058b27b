"""One module per `gpuaas` subcommand; each exposes `configure(parser)` and `run(args) -> int`."""
