"""The project's version, written here and nowhere else.

setuptools reads it for the distribution (pyproject's dynamic version), the agent reports it when it registers
(``Register.agent_version``), ``labctl --version`` and ``storagelab-agent --version`` print it, and
tests/unit/test_version.py keeps the CHANGELOG's latest released heading equal to it. A release bumps this line
and turns the CHANGELOG's Unreleased section into that version's heading. It is a plain assignment on purpose:
setuptools reads it without importing the package (a build needs none of the project's dependencies).
"""

__version__ = "0.13.0"
