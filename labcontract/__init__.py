"""The contract shared by the controller and the agents.

Everything both sides must agree on lives here and nowhere else: the suite schema
(:mod:`labcontract.suite`), the fio job renderer (:mod:`labcontract.fiojob`), the result
schema and fio output parser (:mod:`labcontract.fioresult`), host facts
(:mod:`labcontract.facts`) and the versioned message protocol (:mod:`labcontract.protocol`).
"""

from labcontract.version import __version__

__all__ = ["__version__"]
