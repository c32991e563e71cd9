"""The ``isrsim`` command line (click): ``cli.main`` is the entry point and registers every command. It
uses ``broker`` and ``protocol`` only through their front doors (the packages' ``__init__``)."""
