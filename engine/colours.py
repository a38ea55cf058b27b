"""One colour per tenant in every chart gpuaas draws: the demo report's two charts and the audit report's.

Why by name and not by position: the demo's allocation chart lists the tenants in the story's order and
its quota chart in the advisor's (alphabetical), so colouring by position painted vision orange in one
and green in the other. A tenant's colour is its place among the sorted names of the tenants charted;
the charts of one report chart the same tenants, so they agree (and the audit report of a demo's
archive, whose tenants are the demo's, agrees with the demo report).
"""

from __future__ import annotations

from collections.abc import Iterable

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
           "#64B5CD")
"""seaborn's "deep" palette: distinct hues that stay apart in print and for the common colour blindnesses."""
NO_TENANT = "#999999"
"""A placeholder such as "(no tenant)" (a run no tenant's record names) is grey, never a tenant's colour."""


def tenant_colours(tenants: Iterable[str]) -> dict[str, str]:
    """Tenant name -> colour: the sorted names take the palette in turn; placeholders ("(...)") are grey."""
    given = list(tenants)
    names = sorted({t for t in given if t and not t.startswith("(")})
    colours = {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(names)}
    return colours | {t: NO_TENANT for t in given if t not in colours}
