"""Text renderers, one module per report: `findings` (scan, and the tables every findings report
shares), `verify`, `difftest` (all five modes), `audit`, `bench`, `monitor` and `gate`.

Each prints onto a rich console it is given (`cli.common.stdout`, or a recording console to
write a file); untrusted strings are escaped for the terminal (`formats.terminal`).
"""

from dflash_guard.formats.text.findings import print_report, render

__all__ = ["print_report", "render"]
