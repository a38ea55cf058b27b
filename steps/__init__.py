"""The step image's code: observe -> plan -> apply -> record, one module per reaction.

Nothing is imported here on purpose: `python -m steps` is a fresh process per reaction and pays
for every import (see steps.entrypoint).
"""
