"""Testing the series of units: upstream's suite per unit tree, and the drop-in.

`stepwise` (`tools/vendor test-series`) runs upstream's tests and the units' own on
the pin plus each unit with the ones before it, choosing tests by what each unit
reaches (`impact`), through warm forked pytest processes (`pytest_run`,
`pytest_server`, `forkpool`); `dropin` (`tools/vendor dropin`) compares upstream's
API and commands on the pinned release and ours. It imports `vendorlib` (the pin,
the units, git), never the other way: the build does not load it.
"""
