"""The parts of ``deltanode.config``, one job each (that module's doc describes the conf files and
re-exports the public names): ``values`` parses a value's text, ``keys`` declares the keys,
``sources`` reads the file, the environment and secret files, ``checks`` checks keys against each
other, ``conf`` builds the ``Conf``, ``markdown`` documents the key table."""
