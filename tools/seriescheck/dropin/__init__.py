"""The drop-in, checked side by side: upstream's API and commands on two trees.

The same usages run on the pristine pinned release (its `src/` on ``sys.path``)
and on ours (the install, or a unit tree of the series), each usage in a fresh
interpreter forked from a parent that has imported the third-party modules
`speculators` needs but no `speculators` module (`forkserver`). Their results
(`cases`: JSON values per case and key) must be equal, except for the
differences a unit states as its purpose, listed once in
`upstream_patches/INTENDED_DIFFERENCES.toml` (`compare`).
"""
