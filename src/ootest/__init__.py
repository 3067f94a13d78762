"""ootest: run PyTorch's upstream device-generic tests on out-of-tree backends.

PYTEST_DONT_REWRITE: a pytest forked from the fork server (Note [Fork server] in
``ootest.runner.forkserver``) finds this package imported before pytest could
mark it for assertion rewriting; this tells pytest not to warn about it. The
marker acts on this module only, which has no asserts.
"""
