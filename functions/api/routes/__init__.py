"""The Api's route groups (Powertools ``Router``s included by ``api.app``) and their helpers.

A route module never imports ``api.app``: what it needs from the execution environment is in
``api.services``; what route groups share is in the helper modules here (``common``,
``tenancy``, ``limits``, ``run_query``, ``approval_decisions``).
"""
