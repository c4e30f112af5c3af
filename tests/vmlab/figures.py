"""The VM tier's figures of one session (image build, boots, site.yml runs, faults), written to .vmlab-times.json
at its end and copied into docs/performance.md. A module of its own: pytest loads conftest.py under another name
than the tests' ``from tests.vmlab.conftest import ...``, and both must see the one dict."""

TIMES: dict[str, float] = {}
