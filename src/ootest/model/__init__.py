"""Model-derived tests: the calls a real model makes, declared as data and run as
variants of upstream ``@ops``/``@modules`` tests, and recorded from any model run.

    entries   which declared calls a test gets and how their variants are named (no torch)
    build     declared tensors and values -> real ones on the device under test
    infos     OpInfo / ModuleInfo objects for declared calls (what the plugin injects)
    record    the recording TorchFunctionMode (runs inside the recorded script)
    write     recorded calls -> a test_suite_config (no torch)
    suite/    ootest's generic test for injected model calls (device vs CPU)

Importing this package imports no torch; see docs/model.md.
"""
