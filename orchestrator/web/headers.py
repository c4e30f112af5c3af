"""The security headers of every response (set by :mod:`orchestrator.web.app`): one home for the policy, read by
the app and by the pages that are framed by this site (their error pages too)."""

from __future__ import annotations

CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
       "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
# a page this site frames (a report in the run page): the same policy, framed by this site only
FRAMED_CSP = CSP.replace("frame-ancestors 'none'", "frame-ancestors 'self'")
