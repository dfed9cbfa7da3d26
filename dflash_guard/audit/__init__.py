"""`dflash-guard audit`: known-bad engines, drafters and packages, from OSV advisories.

`osv` validates records against the published OSV schema, `feeds` reads, downloads and judges
feeds (signatures, age), `match` decides each advisory against what the lock pins (git ancestry
for engine and Hub commits, PEP 440 order for packages), `run` ties them together, `sarif`
renders a report, and `author` writes a team's own advisory.
"""
