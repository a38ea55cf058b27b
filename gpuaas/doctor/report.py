"""The doctor's table: one row per finding (status, check, what was found), the fix under each finding
that is not ok, then what could not be checked and why."""

from __future__ import annotations

import textwrap

from gpuaas.doctor.findings import Report, Status

MARK = {Status.OK: "ok", Status.WARN: "WARN", Status.BLOCKS: "BLOCKS"}


def render_table(report: Report, *, verbose: bool = False, width: int = 110) -> str:
    check_width = max((len(f.check) for f in report.findings), default=5)
    lines = [f"{'status':<7} {'check':<{check_width}}  finding", f"{'-' * 7} {'-' * check_width}  {'-' * 40}"]
    indent = " " * (8 + check_width + 2)
    for finding in report.findings:
        summary = textwrap.wrap(finding.summary, width=max(40, width - len(indent))) or [""]
        lines.append(f"{MARK[finding.status]:<7} {finding.check:<{check_width}}  {summary[0]}")
        lines += [indent + more for more in summary[1:]]
        if finding.status != Status.OK and finding.fix:
            fix = finding.fix.splitlines()
            lines.append(f"{indent}fix: {fix[0]}")
            lines += [f"{indent}     {line}" for line in fix[1:]]
        if verbose or finding.status != Status.OK:
            lines += [f"{indent}  - {detail}" for detail in finding.details if detail]
    if report.not_checked:
        lines.append("")
        lines.append("not checked (their input could not be read):")
        lines += [f"  {check}: {why}" for check, why in report.not_checked.items()]
    unread = {k: v for k, v in report.unreadable.items() if k not in ("kueue-config",) or verbose}
    if unread:
        lines.append("")
        lines.append("could not read:")
        lines += [f"  {what}: {why}" for what, why in unread.items()]
    counts = {s: sum(1 for f in report.findings if f.status == s) for s in Status}
    lines.append("")
    verdict = {Status.OK: "nothing blocks", Status.WARN: "nothing blocks (degraded: see WARN)",
               Status.BLOCKS: "the product cannot react: fix what BLOCKS"}[report.worst]
    lines.append(f"{counts[Status.OK]} ok, {counts[Status.WARN]} warn, {counts[Status.BLOCKS]} blocks: {verdict}"
                 + ("" if report.probe_requested else "; end-to-end probe not run (add --probe)"))
    return "\n".join(lines)
