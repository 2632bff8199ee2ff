"""Fixtures for the local-mode tests (moto process, fake services), from local_stack."""

from tests.integration.local_stack import moto, services, services_process

__all__ = ["moto", "services", "services_process"]
