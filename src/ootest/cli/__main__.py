from ootest.cli.main import entry

entry()
