"""The application: configuration, the composition root, job handlers, the HTTP API and
the CLI.

- :mod:`.config` — the configuration file, validated;
- :mod:`.services` — the composition root: every service built from the configuration;
- :mod:`.handlers` — the job kinds this application runs (compile, sync);
- :mod:`.api` — the HTTP API (Statewave v1 compatible);
- :mod:`.cli` — the ``memsync`` command, one module per command group.
"""
