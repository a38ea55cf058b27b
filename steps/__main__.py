"""`python -m steps <reaction> PARAMS_FILE` (see steps.entrypoint)."""

import sys

from steps.entrypoint import main

sys.exit(main(sys.argv[1:]))
