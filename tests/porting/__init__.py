"""The porting differential test: AWS SDK handlers against their ports (issue 32).

``sdk_handlers.py`` and ``run_sdk.py`` run only in the ``.venv-bench`` interpreter (they import
AWS's SDK); ``ported_agents.py`` and ``test_porting_differential.py`` in the project's.
"""
